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
export type Output = (typeof OUTPUTS)[number];
/**
 * What one item ends as: an output, or 'failed' — the relay refused the
 * request (or answered something no output stands for), which the node
 * raises as an n8n error (NodeApiError) instead of routing it.
 */
export type Outcome = Output | 'failed';

/**
 * What the node does with one relay answer: an outcome, 'wait' (Retry-After,
 * then the same request) or 'noAnswer' (treated as if no answer came: the
 * same request is repeated, at most maxNoAnswer times).
 */
export type Decision = Outcome | 'wait' | 'noAnswer';

/** errorOf is the relay's JSON error object of body, or undefined. */
export function errorOf(body: unknown): Record<string, unknown> | undefined {
	if (body === null || typeof body !== 'object') {
		return undefined;
	}
	const e = (body as Record<string, unknown>).error;
	return e !== null && typeof e === 'object' && typeof (e as Record<string, unknown>).code === 'string' ? (e as Record<string, unknown>) : undefined;
}

/**
 * relayError reports whether body is the relay's own JSON error
 * (`{"error": {"code": "..."}}`), as opposed to a proxy's HTML or text page.
 */
export function relayError(body: unknown): boolean {
	return errorOf(body) !== undefined;
}

/**
 * classify maps a /v1/send answer to an outcome, or to 'wait' when the
 * relay said "try again after Retry-After" (409 in flight, 429, 503).
 *
 * 200 is sent (now or replayed). 202 means the relay owns the job: pending
 * while it settles by itself (queued, unknown), needsFix when it waits for
 * a person (state review). A 409 without Retry-After whose code is
 * `conflict` is a job an operator abandoned: needsFix too (a decision, not
 * an error of the workflow). 504 (a gateway timeout, or the relay's own
 * injected drop: the outcome is unknown and the relay owns the job) and a
 * 502 that is not the relay's JSON error (a proxy's bad gateway) are
 * 'noAnswer': the caller repeats the same request with the same key, which
 * the relay answers 200 (replayed) or 202, never a second e-mail. Every
 * other answer (400, 401, 403, 404, 413, 422, 502 provider_rejected, 500,
 * another 409) is a refusal the workflow must fix: 'failed'.
 */
export function classify(status: number, retryAfter: number | undefined, body?: unknown): Decision {
	switch (true) {
		case status === 200:
			return 'sent';
		case status === 202:
			return stateOf(body) === 'review' ? 'needsFix' : 'pending';
		case status === 409 && retryAfter !== undefined:
			return 'wait';
		case status === 409 && errorOf(body)?.code === 'conflict':
			return 'needsFix';
		case status === 429 || status === 503:
			return 'wait';
		case status === 504:
			return 'noAnswer';
		case status === 502 && !relayError(body):
			return 'noAnswer';
		default:
			return 'failed';
	}
}

/** stateOf is the job state a /v1/send answer names (top level, or in its error). */
function stateOf(body: unknown): string | undefined {
	if (body === null || typeof body !== 'object') {
		return undefined;
	}
	return str((body as Record<string, unknown>).state) ?? str(errorOf(body)?.state);
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

/**
 * A parameter value as n8n evaluates it. An expression such as
 * `{{ $json.orderId }}` gives undefined when the field is missing and null
 * when it is null; it may also give a number or an object. Such values are
 * never passed through String(): "undefined" is no order id.
 */
export type ParamValue = unknown;

/** The key of one item: the three named parts, or one key string. */
export type KeySpec = { customerId: ParamValue; eventType: ParamValue; orderId: ParamValue } | { key: ParamValue };

/** The message of one item (values as n8n evaluated them). */
export interface Message {
	to: ParamValue;
	subject?: ParamValue;
	text?: ParamValue;
	html?: ParamValue;
	cc?: ParamValue;
	bcc?: ParamValue;
	replyTo?: ParamValue;
	from?: ParamValue;
	channel?: ParamValue;
	threadId?: ParamValue;
	[extra: string]: ParamValue;
}

/** isBlank: undefined, null, or a string that is empty after trimming. */
export function isBlank(v: ParamValue): boolean {
	return v === undefined || v === null || (typeof v === 'string' && v.trim() === '');
}

/**
 * textOf turns one non-blank parameter value into text: a string as it is,
 * a number or boolean by String(); an object or array is an error naming
 * the parameter (its String() would be "[object Object]").
 */
function textOf(v: ParamValue, name: string): string {
	if (typeof v === 'string') {
		return v;
	}
	if (typeof v === 'number' || typeof v === 'boolean' || typeof v === 'bigint') {
		return String(v);
	}
	throw new Error(`${name} is not text: its expression gives ${Array.isArray(v) ? 'a list' : 'an object'}`);
}

const blankHint = 'an expression whose field is missing or null gives nothing, never the text "undefined"';

/** required reads a parameter that must not be blank; the error names it. */
function required(v: ParamValue, name: string, why: string): string {
	if (isBlank(v)) {
		throw new Error(`${name} is empty${why} (${blankHint})`);
	}
	return textOf(v, name);
}

/** The optional message fields: n8n's display name, the /v1/send field. */
const optionalFields: Array<[keyof Message & string, string, string]> = [
	['subject', 'Subject', 'subject'],
	['text', 'Text', 'text'],
	['html', 'HTML', 'html'],
	['cc', 'CC', 'cc'],
	['bcc', 'BCC', 'bcc'],
	['replyTo', 'Reply To', 'reply_to'],
	['from', 'From', 'from'],
	['channel', 'Channel', 'channel'],
	['threadId', 'Thread ID', 'thread_id'],
];

/**
 * buildBody builds the /v1/send JSON body. A blank key part or To
 * (undefined, null, or empty after trimming) is an error naming the n8n
 * parameter, so the item fails before any request instead of being sent
 * under a key such as "cus_1:order.shipped:undefined" that every order
 * without an id would share. Blank optional fields are left out, Subject
 * included: Gmail sends a message without a subject, and so does the relay.
 */
export function buildBody(k: KeySpec, m: Message): Record<string, unknown> {
	const body: Record<string, unknown> = {};
	if ('key' in k) {
		body.key = required(k.key, 'Idempotency Key', '');
	} else {
		const why = ': the key is customer id, event type and order id';
		body.job = {
			customer_id: required(k.customerId, 'Customer ID', why),
			event_type: required(k.eventType, 'Event Type', why),
			order_id: required(k.orderId, 'Order ID', why),
		};
	}
	body.to = required(m.to, 'To', '');
	for (const [from, name, to] of optionalFields) {
		const v = m[from];
		if (!isBlank(v)) {
			body[to] = textOf(v, name);
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

/**
 * What the node emits for one item. http_tries counts the HTTP requests this
 * node made for the item (repeats and waits included); it is not the
 * relay's `attempts`, which counts attempts at Gmail.
 */
export interface SendResult {
	outcome: Outcome;
	status?: number;
	message_id?: string;
	state?: string;
	replayed: boolean;
	http_tries: number;
	body?: unknown;
	error?: string;
}

/**
 * send posts one message to /v1/send and follows the relay's answers:
 * outcome 'failed' is a refusal (see classify), for the node to raise;
 * it waits Retry-After on 409/429/503 (at most limits.maxWaits times), and
 * repeats a request that got no answer (a dropped response, a reset, a
 * 504, a proxy's 502) at most limits.maxNoAnswer times — the relay answers such a repeat 202
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
	let tries = 0;
	let last: SendResult | undefined;
	for (;;) {
		tries++;
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
			last = { outcome: 'retryLater', replayed: false, http_tries: tries, error: `no answer from the relay: ${msg}` };
			if (noAnswer > limits.maxNoAnswer) {
				return last;
			}
			continue;
		}
		const b = (res.body !== null && typeof res.body === 'object' ? res.body : {}) as Record<string, unknown>;
		const ra = retryAfterSeconds(res.headers);
		const d = classify(res.statusCode, ra, res.body);
		const errObj = (b.error !== null && typeof b.error === 'object' ? b.error : {}) as Record<string, unknown>;
		const result: SendResult = {
			outcome: d === 'wait' || d === 'noAnswer' ? 'retryLater' : d,
			status: res.statusCode,
			message_id: str(b.message_id) ?? str(errObj.message_id),
			state: str(b.state) ?? str(errObj.state),
			replayed: header(res.headers, 'idempotent-replayed') === 'true' || b.replayed === true,
			http_tries: tries,
			body: res.body,
		};
		if (d === 'noAnswer') {
			// A gateway timeout or a proxy's bad gateway says nothing about
			// the send: like a lost answer, repeat it with the same key.
			noAnswer++;
			last = { ...result, error: `no answer from the relay: HTTP ${res.statusCode}` };
			if (noAnswer > limits.maxNoAnswer) {
				return last;
			}
			continue;
		}
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

/**
 * refusal describes a failed result for an n8n error: message names the
 * status, the relay's error code and field, description is the relay's
 * message (or the start of a body that is not the relay's JSON).
 */
export function refusal(r: SendResult): { message: string; description: string } {
	const e = errorOf(r.body);
	if (e === undefined) {
		const text = typeof r.body === 'string' ? r.body : JSON.stringify(r.body ?? '');
		return { message: `gmailrelay answered HTTP ${r.status ?? '?'}`, description: text.slice(0, 300) };
	}
	const field = str(e.field) ? `, field ${String(e.field)}` : '';
	return {
		message: `gmailrelay refused the e-mail: ${r.status ?? '?'} ${String(e.code)}${field}`,
		description: str(e.message) ?? String(e.code),
	};
}

function str(v: unknown): string | undefined {
	return typeof v === 'string' && v !== '' ? v : undefined;
}

/** trimBase drops trailing slashes from the relay URL. */
export function trimBase(u: string): string {
	return String(u).replace(/\/+$/, '');
}
