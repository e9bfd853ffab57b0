/**
 * Pure logic of the gmailrelay nodes, kept free of n8n's runtime so that it
 * can be unit-tested with a mocked HTTP helper.
 */

/** The subset of n8n's IHttpRequestOptions the nodes use. */
export interface RequestOptions {
	method: 'GET' | 'POST';
	url: string;
	body?: Record<string, unknown>;
	json: true;
	returnFullResponse: true;
	ignoreHttpStatusErrors: true;
	timeout?: number;
}

/** A full response as n8n's httpRequest returns it with returnFullResponse. */
export interface FullResponse {
	statusCode: number;
	headers: Record<string, string | string[] | undefined>;
	body: unknown;
}

/** Performs one HTTP request (n8n's httpRequestWithAuthentication in the node). */
export type Requester = (opts: RequestOptions) => Promise<FullResponse>;

/** Waits ms milliseconds (injected, so tests need no real clock). */
export type Sleeper = (ms: number) => Promise<void>;

/** The Send node's outputs, in order. */
export const OUTPUTS = ['sent', 'pending', 'retryLater', 'needsFix'] as const;
/** One of the Send node's outputs. */
export type Outcome = (typeof OUTPUTS)[number];

/** What the node does with one relay answer. */
export type Decision = Outcome | 'wait';

/**
 * classify maps a /v1/send answer to an output, or to 'wait' when the
 * relay said "try again after Retry-After" (409 in flight, 429, 503).
 * 200 is sent (now or replayed); 202 means the relay owns the job (unknown
 * or review): never resend it under a new key. A 409 without Retry-After is
 * an abandoned job; every other answer needs a fix in the workflow (400,
 * 401, 403, 413, 422, 502 provider_rejected, 500).
 */
export function classify(status: number, retryAfter: number | undefined): Decision {
	switch (true) {
		case status === 200:
			return 'sent';
		case status === 202:
			return 'pending';
		case status === 409:
			return retryAfter === undefined ? 'needsFix' : 'wait';
		case status === 429 || status === 503:
			return 'wait';
		default:
			return 'needsFix';
	}
}

/** header reads a header case-insensitively. */
export function header(h: FullResponse['headers'], name: string): string | undefined {
	const want = name.toLowerCase();
	for (const [k, v] of Object.entries(h ?? {})) {
		if (k.toLowerCase() === want) {
			return Array.isArray(v) ? v[0] : v;
		}
	}
	return undefined;
}

/** retryAfterSeconds parses Retry-After (seconds); undefined when absent or not a number. */
export function retryAfterSeconds(h: FullResponse['headers']): number | undefined {
	const v = header(h, 'retry-after');
	if (v === undefined || !/^\s*\d+\s*$/.test(v)) {
		return undefined;
	}
	return Number(v);
}

const risky: Array<[RegExp, string]> = [
	[/\$now\b/, '$now'],
	[/\$today\b/, '$today'],
	[/\$execution\s*\.\s*id\b/, '$execution.id'],
	[/\$runIndex\b/, '$runIndex'],
	[/Math\s*\.\s*random\b/, 'Math.random()'],
	[/\$randomInt\b|\brandomInt\b/, 'a random number'],
	[/randomUUID|\buuid\b|\$uuid\b/, 'a random UUID'],
	[/Date\s*\.\s*now\b|new\s+Date\s*\(\s*\)/, 'the current time'],
];

/**
 * keyWarnings returns one warning per clock, execution or random value found
 * in the raw (unevaluated) parameters the key is built from. Such a key
 * changes on every run, so a retry becomes a second e-mail.
 */
export function keyWarnings(raw: Record<string, unknown>): string[] {
	const out: string[] = [];
	for (const [name, value] of Object.entries(raw)) {
		if (typeof value !== 'string') {
			continue;
		}
		for (const [re, what] of risky) {
			if (re.test(value)) {
				out.push(
					`The idempotency key (${name}) uses ${what}: it changes on every run, so a retry is sent as a new e-mail. Take the key from the event (customer id, event type, order id).`,
				);
			}
		}
	}
	return out;
}

/** The key of one item: the three named parts, or one key string. */
export type KeySpec = { customerId: string; eventType: string; orderId: string } | { key: string };

/** The message of one item. */
export interface Message {
	to: string;
	subject: string;
	text?: string;
	html?: string;
	cc?: string;
	bcc?: string;
	replyTo?: string;
	from?: string;
	channel?: string;
	threadId?: string;
}

/**
 * buildBody builds the /v1/send JSON body. A blank key part is an error
 * naming the part (the relay would answer 400 too, but the node says which
 * n8n field is empty).
 */
export function buildBody(k: KeySpec, m: Message): Record<string, unknown> {
	const body: Record<string, unknown> = {};
	if ('key' in k) {
		if (k.key.trim() === '') {
			throw new Error('Idempotency Key is empty');
		}
		body.key = k.key;
	} else {
		for (const [n, v] of [
			['Customer ID', k.customerId],
			['Event Type', k.eventType],
			['Order ID', k.orderId],
		] as const) {
			if (String(v ?? '').trim() === '') {
				throw new Error(`${n} is empty: the key is customer id, event type and order id`);
			}
		}
		body.job = { customer_id: String(k.customerId), event_type: String(k.eventType), order_id: String(k.orderId) };
	}
	body.to = m.to;
	body.subject = m.subject;
	const optional: Array<[keyof Message, string]> = [
		['text', 'text'],
		['html', 'html'],
		['cc', 'cc'],
		['bcc', 'bcc'],
		['replyTo', 'reply_to'],
		['from', 'from'],
		['channel', 'channel'],
		['threadId', 'thread_id'],
	];
	for (const [from, to] of optional) {
		const v = m[from];
		if (v !== undefined && v !== '') {
			body[to] = v;
		}
	}
	return body;
}

/** Limits of the node's own retries. */
export interface SendLimits {
	/** How many times a "try again" answer (409/429/503) is waited for. */
	maxWaits: number;
	/** Longest single wait, in seconds. */
	maxWaitSeconds: number;
	/** How many times a request with no answer at all is repeated. */
	maxNoAnswer: number;
	/** Per-request timeout in ms. */
	timeoutMs: number;
}

/** What the node emits for one item. */
export interface SendResult {
	outcome: Outcome;
	status?: number;
	message_id?: string;
	state?: string;
	replayed: boolean;
	attempts: number;
	body?: unknown;
	error?: string;
}

/**
 * send posts one message to /v1/send and follows the relay's answers:
 * it waits Retry-After on 409/429/503 (at most limits.maxWaits times), and
 * repeats a request that got no answer (a dropped response, a reset) at
 * most limits.maxNoAnswer times — the relay answers such a repeat 202
 * (pending) or 200 (replayed), never a second e-mail. It never throws for
 * an HTTP status.
 */
export async function send(
	req: Requester,
	sleep: Sleeper,
	baseUrl: string,
	body: Record<string, unknown>,
	limits: SendLimits,
): Promise<SendResult> {
	let waits = 0;
	let noAnswer = 0;
	let attempts = 0;
	let last: SendResult | undefined;
	for (;;) {
		attempts++;
		let res: FullResponse;
		try {
			res = await req({
				method: 'POST',
				url: trimBase(baseUrl) + '/v1/send',
				body,
				json: true,
				returnFullResponse: true,
				ignoreHttpStatusErrors: true,
				timeout: limits.timeoutMs,
			});
		} catch (err) {
			noAnswer++;
			const msg = err instanceof Error ? err.message : String(err);
			last = { outcome: 'retryLater', replayed: false, attempts, error: `no answer from the relay: ${msg}` };
			if (noAnswer > limits.maxNoAnswer) {
				return last;
			}
			continue;
		}
		const b = (res.body ?? {}) as Record<string, unknown>;
		const ra = retryAfterSeconds(res.headers);
		const d = classify(res.statusCode, ra);
		const errObj = (b.error ?? {}) as Record<string, unknown>;
		const result: SendResult = {
			outcome: d === 'wait' ? 'retryLater' : d,
			status: res.statusCode,
			message_id: str(b.message_id) ?? str(errObj.message_id),
			state: str(b.state) ?? str(errObj.state),
			replayed: header(res.headers, 'idempotent-replayed') === 'true' || b.replayed === true,
			attempts,
			body: res.body,
		};
		if (d !== 'wait') {
			return result;
		}
		if (waits >= limits.maxWaits) {
			return result;
		}
		waits++;
		await sleep(Math.min(ra ?? 5, limits.maxWaitSeconds) * 1000);
	}
}

function str(v: unknown): string | undefined {
	return typeof v === 'string' && v !== '' ? v : undefined;
}

/** trimBase drops trailing slashes from the relay URL. */
export function trimBase(u: string): string {
	return String(u).replace(/\/+$/, '');
}
