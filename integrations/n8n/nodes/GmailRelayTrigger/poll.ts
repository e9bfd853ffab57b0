import { trimBase, type Requester } from '../GmailRelay/logic';

/** A job as GET /v1/jobs lists it (the fields the trigger reads). */
export interface Job {
	message_id: string;
	state: string;
	channel?: string;
	key?: string;
	attempts?: number;
	updated_at?: string;
	created_at?: string;
	[k: string]: unknown;
}

/** What the trigger polls for. */
export interface PollOptions {
	/** Also emit jobs waiting in `queued` (the outbox) longer than queuedOlderThanMs. */
	includeQueued: boolean;
	queuedOlderThanMs: number;
	/** Most pages of 100 read per state and poll. */
	maxPages: number;
}

/** The trigger's memory between polls: message_id → state it was emitted in. */
export type Seen = Record<string, string>;

/** One poll's result. */
export interface PollResult {
	jobs: Array<Job & { url: string; resolve_url: string; reason: string }>;
	seen: Seen;
	/** Set when the relay has no `queued` state (no outbox yet): that part was skipped. */
	queuedUnavailable?: boolean;
}

/**
 * listState reads every job in one state (following `next`, at most
 * maxPages pages). It answers undefined when the relay does not know the
 * state (400 naming field `state`), so optional states can be skipped.
 */
export async function listState(req: Requester, baseUrl: string, state: string, maxPages: number): Promise<Job[] | undefined> {
	const out: Job[] = [];
	let after = '';
	for (let page = 0; page < maxPages; page++) {
		const q = new URLSearchParams({ state, limit: '100' });
		if (after) {
			q.set('after', after);
		}
		const res = await req({
			method: 'GET',
			url: `${trimBase(baseUrl)}/v1/jobs?${q.toString()}`,
			json: true,
			returnFullResponse: true,
			ignoreHttpStatusErrors: true,
		});
		const b = (res.body ?? {}) as { jobs?: Job[]; next?: string; error?: { field?: string; message?: string } };
		if (res.statusCode === 400 && b.error?.field === 'state') {
			return undefined;
		}
		if (res.statusCode !== 200) {
			throw new Error(`GET /v1/jobs?state=${state}: ${res.statusCode} ${b.error?.message ?? ''}`.trim());
		}
		out.push(...(b.jobs ?? []));
		if (!b.next) {
			break;
		}
		after = b.next;
	}
	return out;
}

/**
 * poll emits the jobs that entered `review` (and, optionally, jobs queued
 * longer than the threshold) since the last poll. A job is emitted once per
 * entry into a state: seen keeps only jobs still listed, so one that leaves
 * review and comes back fires again. In manual mode every current job is
 * emitted (n8n's convention for a test poll) and seen is not changed.
 */
export async function poll(req: Requester, baseUrl: string, o: PollOptions, seen: Seen, now: Date, manual: boolean): Promise<PollResult> {
	const base = trimBase(baseUrl);
	const current: Array<{ job: Job; reason: string }> = [];
	const review = (await listState(req, base, 'review', o.maxPages)) ?? [];
	for (const j of review) {
		current.push({ job: j, reason: 'review' });
	}
	let queuedUnavailable: boolean | undefined;
	if (o.includeQueued) {
		const queued = await listState(req, base, 'queued', o.maxPages);
		if (queued === undefined) {
			queuedUnavailable = true;
		} else {
			for (const j of queued) {
				const since = Date.parse(j.updated_at ?? j.created_at ?? '');
				if (!Number.isNaN(since) && now.getTime() - since >= o.queuedOlderThanMs) {
					current.push({ job: j, reason: 'queued too long' });
				}
			}
		}
	}
	const next: Seen = {};
	const jobs: PollResult['jobs'] = [];
	for (const { job, reason } of current) {
		next[job.message_id] = job.state;
		if (manual || seen[job.message_id] !== job.state) {
			const path = '/v1/jobs/' + encodeURIComponent(job.message_id);
			jobs.push({ ...job, reason, url: base + path, resolve_url: base + path + '/resolve' });
		}
	}
	return { jobs, seen: manual ? seen : next, queuedUnavailable };
}
