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
	/** Recipients delivery reports said failed, and said delayed (counts; absent when none). */
	bounced?: number;
	delayed?: number;
	[k: string]: unknown;
}

/** What the trigger polls for. */
export interface PollOptions {
	/** Also emit jobs waiting in `queued` (the outbox) longer than queuedOlderThanMs. */
	includeQueued: boolean;
	queuedOlderThanMs: number;
	/**
	 * Also emit jobs a delivery report said some recipient of failed
	 * (GET /v1/jobs?delivery=bounced): once when a job bounces, and again
	 * when its count of bounced recipients grows.
	 */
	includeBounced?: boolean;
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

/** The trigger's memory of bounced jobs: message_id → bounced recipients when last emitted. */
export type SeenBounced = Record<string, number>;

/**
 * Delivery is what delivery reports said of a sent job's recipients, as
 * GET /v1/jobs/{id} shows it: state bounced | partly_bounced | delayed |
 * no_report, and the addresses.
 */
export interface Delivery {
	state: string;
	bounced: string[];
	delayed: string[];
}

/** An emitted item: the job, why it was emitted, its links, and for a bounce its delivery. */
export type Emitted = Job & JobLinks & { reason: string; delivery?: Delivery };

/** One poll's result. */
export interface PollResult {
	jobs: Emitted[];
	seen: Seen;
	seenBounced: SeenBounced;
	/** Set when the relay has no `queued` state (no outbox yet): that part was skipped. */
	queuedUnavailable?: boolean;
	/**
	 * Set when the relay cannot list bounced jobs (it refused ?delivery=,
	 * or ignored it and listed jobs without a bounced count): that part
	 * was skipped.
	 */
	bouncedUnavailable?: boolean;
	/** Listings (states, or "bounced") that stopped at maxPages with more pages left. */
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
	return listJobs(req, baseUrl, 'state', state, maxPages, onTruncated);
}

/**
 * listBounced reads every job GET /v1/jobs?delivery=bounced lists, as
 * listState does. It answers undefined when the relay cannot filter by
 * delivery: it refused the parameter (400 naming field `delivery`), or it
 * ignored it, which a listed job without a bounced count shows (a relay
 * that knows the filter lists only jobs with one); reading on would walk
 * the whole log and emit jobs that never bounced.
 */
export async function listBounced(req: Requester, baseUrl: string, maxPages: number, onTruncated: () => void = () => {}): Promise<Job[] | undefined> {
	const hasCount = (j: Job) => typeof j.bounced === 'number' && j.bounced > 0;
	return listJobs(req, baseUrl, 'delivery', 'bounced', maxPages, onTruncated, hasCount);
}

/**
 * listJobs reads every job of GET /v1/jobs?FIELD=VALUE, page by page. A 400
 * naming field, or a listed job that accept refuses, answers undefined.
 */
async function listJobs(
	req: Requester,
	baseUrl: string,
	field: string,
	value: string,
	maxPages: number,
	onTruncated: () => void,
	accept: (j: Job) => boolean = () => true,
): Promise<Job[] | undefined> {
	const out: Job[] = [];
	let after = '';
	for (let page = 0; page < maxPages; page++) {
		const q = new URLSearchParams({ [field]: value, limit: '100' });
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
		if (res.statusCode === 400 && b.error?.field === field) {
			return undefined;
		}
		if (res.statusCode !== 200) {
			throw new RelayHttpError(res.statusCode, res.body, `GET /v1/jobs?${field}=${value}: ${res.statusCode} ${b.error?.message ?? ''}`.trim());
		}
		const jobs = b.jobs ?? [];
		if (!jobs.every(accept)) {
			return undefined;
		}
		out.push(...jobs);
		if (!b.next) {
			return out;
		}
		after = b.next;
	}
	onTruncated();
	return out;
}

/**
 * jobDelivery reads the delivery of one job (GET /v1/jobs/{id}); undefined
 * when the view has none.
 */
export async function jobDelivery(req: Requester, baseUrl: string, messageId: string): Promise<Delivery | undefined> {
	const url = jobLinks(trimBase(baseUrl), messageId).api_url;
	const res = await req({ method: 'GET', url, json: true, returnFullResponse: true, ignoreHttpStatusErrors: true });
	const b = (res.body ?? {}) as { delivery?: Delivery; error?: { message?: string } };
	if (res.statusCode !== 200) {
		throw new RelayHttpError(res.statusCode, res.body, `GET /v1/jobs/${encodeURIComponent(messageId)}: ${res.statusCode} ${b.error?.message ?? ''}`.trim());
	}
	return b.delivery;
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
 * longer than the threshold, and bounced jobs) since the last poll. A job
 * is emitted once per entry into a state: seen keeps only jobs still
 * listed, so one that leaves review and comes back fires again. A bounced
 * job is emitted when it is first listed, and again when its count of
 * bounced recipients grows (a later report for another recipient), with
 * its delivery read from the job's view; seenBounced keeps only jobs
 * still listed. In manual mode every current job is emitted (n8n's
 * convention for a test poll) and neither memory is changed.
 */
export async function poll(
	req: Requester,
	baseUrl: string,
	o: PollOptions,
	seen: Seen,
	now: Date,
	manual: boolean,
	seenBounced: SeenBounced = {},
): Promise<PollResult> {
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
	const jobs: Emitted[] = [];
	for (const { job, reason } of current) {
		next[job.message_id] = job.state;
		if (manual || seen[job.message_id] !== job.state) {
			jobs.push({ ...job, reason, ...jobLinks(base, job.message_id) });
		}
	}
	let bouncedUnavailable: boolean | undefined;
	const nextBounced: SeenBounced = {};
	if (o.includeBounced) {
		const bounced = await listBounced(req, base, o.maxPages, () => truncated.push('bounced'));
		if (bounced === undefined) {
			bouncedUnavailable = true;
		}
		for (const job of bounced ?? []) {
			const count = job.bounced ?? 0;
			nextBounced[job.message_id] = count;
			if (manual || (seenBounced[job.message_id] ?? 0) < count) {
				const delivery = await jobDelivery(req, base, job.message_id);
				jobs.push({ ...job, reason: 'bounced', ...jobLinks(base, job.message_id), ...(delivery ? { delivery } : {}) });
			}
		}
	}
	return {
		jobs,
		seen: manual ? seen : next,
		seenBounced: manual ? seenBounced : nextBounced,
		queuedUnavailable,
		bouncedUnavailable,
		...(truncated.length > 0 ? { truncated } : {}),
	};
}
