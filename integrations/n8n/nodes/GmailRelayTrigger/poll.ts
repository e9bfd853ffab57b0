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
	/** The stored message's To addresses and subject (empty once retention dropped it). */
	to?: string[];
	subject?: string;
	/** The caller's "not before" (RFC 3339); absent when the job may go at once. */
	send_at?: string;
	[k: string]: unknown;
}

/** What the trigger polls for. */
export interface PollOptions {
	/** Also emit jobs waiting in `queued` (the outbox) longer than queuedOlderThanMs. */
	includeQueued: boolean;
	queuedOlderThanMs: number;
	/**
	 * Most pages of 100 read per state and poll: a safety cap only (a relay
	 * that kept answering `next` forever). Pages are in Message-ID order, not
	 * by age, so a cap that is reached can hide new jobs: it is reported in
	 * PollResult.truncated.
	 */
	maxPages: number;
}

/**
 * JobLinks are where a human and a program go for a job. url and
 * resolve_url are the relay console's page of the job (/ui/jobs/{id}),
 * which shows the evidence and holds the decision form; api_url and
 * api_resolve_url are the API's (GET /v1/jobs/{id}, POST …/resolve with
 * the admin token) for a workflow that decides by itself.
 */
export interface JobLinks {
	url: string;
	resolve_url: string;
	api_url: string;
	api_resolve_url: string;
}

/** jobLinks are the links of the job message_id on the relay at base (no trailing slash). */
export function jobLinks(base: string, messageId: string): JobLinks {
	const id = encodeURIComponent(messageId);
	const page = `${base}/ui/jobs/${id}`;
	const api = `${base}/v1/jobs/${id}`;
	return { url: page, resolve_url: page, api_url: api, api_resolve_url: `${api}/resolve` };
}

/** The trigger's memory between polls: message_id → state it was emitted in. */
export type Seen = Record<string, string>;

/** One poll's result. */
export interface PollResult {
	jobs: Array<Job & JobLinks & { reason: string }>;
	seen: Seen;
	/** Set when the relay has no `queued` state (no outbox yet): that part was skipped. */
	queuedUnavailable?: boolean;
	/** States whose listing stopped at maxPages with more pages left. */
	truncated?: string[];
}

/** RelayHttpError is an answer of GET /v1/jobs other than 200 (the Trigger raises it as a NodeApiError). */
export class RelayHttpError extends Error {
	constructor(
		readonly status: number,
		readonly body: unknown,
		message: string,
	) {
		super(message);
		this.name = 'RelayHttpError';
	}
}

/**
 * listState reads every job in one state (following `next` until the relay
 * gives none, at most maxPages pages; onTruncated is called when pages were
 * left). It answers undefined when the relay does not know the state (400
 * naming field `state`), so optional states can be skipped.
 */
export async function listState(
	req: Requester,
	baseUrl: string,
	state: string,
	maxPages: number,
	onTruncated: () => void = () => {},
): Promise<Job[] | undefined> {
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
			throw new RelayHttpError(res.statusCode, res.body, `GET /v1/jobs?state=${state}: ${res.statusCode} ${b.error?.message ?? ''}`.trim());
		}
		out.push(...(b.jobs ?? []));
		if (!b.next) {
			return out;
		}
		after = b.next;
	}
	onTruncated();
	return out;
}

/**
 * queuedSince is when a queued job became due: the later of its acceptance
 * (created_at) and its send_at. Not updated_at: every outbox attempt that
 * finds Gmail busy or unreachable rewrites it, so a job stuck for an hour
 * would always look a few seconds old; and a job scheduled with send_at is
 * not late before that time. undefined when created_at is unreadable.
 */
export function queuedSince(j: Job): number | undefined {
	const created = Date.parse(j.created_at ?? '');
	if (Number.isNaN(created)) {
		return undefined;
	}
	const sendAt = Date.parse(j.send_at ?? '');
	return Number.isNaN(sendAt) ? created : Math.max(created, sendAt);
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
	const truncated: string[] = [];
	const review = (await listState(req, base, 'review', o.maxPages, () => truncated.push('review'))) ?? [];
	for (const j of review) {
		current.push({ job: j, reason: 'review' });
	}
	let queuedUnavailable: boolean | undefined;
	if (o.includeQueued) {
		const queued = await listState(req, base, 'queued', o.maxPages, () => truncated.push('queued'));
		if (queued === undefined) {
			queuedUnavailable = true;
		} else {
			for (const j of queued) {
				const since = queuedSince(j);
				if (since !== undefined && now.getTime() - since >= o.queuedOlderThanMs) {
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
			jobs.push({ ...job, reason, ...jobLinks(base, job.message_id) });
		}
	}
	return { jobs, seen: manual ? seen : next, queuedUnavailable, ...(truncated.length > 0 ? { truncated } : {}) };
}
