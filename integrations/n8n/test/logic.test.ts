import assert from 'node:assert/strict';
import { test } from 'node:test';

import { buildBody, classify, keyWarnings, refusal, send, type FullResponse, type RequestOptions } from '../nodes/GmailRelay/logic';

const limits = { maxWaits: 2, maxWaitSeconds: 30, maxNoAnswer: 2, timeoutMs: 1000 };

/** scripted returns a Requester that answers the given responses in order (an Error is thrown). */
function scripted(answers: Array<FullResponse | Error>) {
	const calls: RequestOptions[] = [];
	const req = async (o: RequestOptions) => {
		calls.push(o);
		const a = answers[calls.length - 1];
		if (a === undefined) {
			throw new Error(`unexpected call ${calls.length}`);
		}
		if (a instanceof Error) {
			throw a;
		}
		return a;
	};
	return { req, calls };
}

function answer(statusCode: number, body: unknown, headers: Record<string, string> = {}): FullResponse {
	return { statusCode, body, headers };
}

test('classify routes every status of CONTRACT.md: refusals are failed (errors), Needs Fix is for a person\'s decision', () => {
	assert.equal(classify(200, undefined), 'sent');
	assert.equal(classify(202, undefined, { state: 'unknown' }), 'pending');
	assert.equal(classify(202, undefined, { state: 'queued' }), 'pending');
	assert.equal(classify(202, undefined, { state: 'review', replayed: true }), 'needsFix', 'a job in review waits for a person');
	assert.equal(classify(409, 2), 'wait');
	const abandoned = { error: { code: 'conflict', field: 'key', message: 'an operator abandoned this job; it will not be sent' } };
	assert.equal(classify(409, undefined, abandoned), 'needsFix', 'abandoned by an operator: a decision, not an error');
	assert.equal(classify(409, undefined, { error: { code: 'message_id_conflict' } }), 'failed', 'another 409 is a refusal');
	assert.equal(classify(429, 30), 'wait');
	assert.equal(classify(503, 1), 'wait');
	for (const s of [400, 401, 403, 404, 413, 415, 422, 500]) {
		assert.equal(classify(s, undefined, { error: { code: 'x' } }), 'failed', String(s));
	}
	assert.equal(classify(502, undefined, { error: { code: 'provider_rejected', message: 'Gmail rejected it' } }), 'failed');
});

test('refusal names the status, the relay\'s code and field; a body that is not the relay\'s JSON is quoted', () => {
	const r = refusal({ outcome: 'failed', status: 400, replayed: false, http_tries: 1, body: { error: { code: 'invalid_argument', field: 'to', message: 'bad address "x"' } } });
	assert.deepEqual(r, { message: 'gmailrelay refused the e-mail: 400 invalid_argument, field to', description: 'bad address "x"' });
	const p = refusal({ outcome: 'failed', status: 500, replayed: false, http_tries: 1, body: '<html>oops</html>' });
	assert.deepEqual(p, { message: 'gmailrelay answered HTTP 500', description: '<html>oops</html>' });
});

test('classify: 504 and a 502 without the relay\'s JSON error are no answer, not Needs Fix', () => {
	assert.equal(classify(504, undefined), 'noAnswer');
	assert.equal(classify(504, undefined, { error: { code: 'fault_injected' } }), 'noAnswer', "the relay's own 504: it owns the job");
	assert.equal(classify(502, undefined, '<html><body>502 Bad Gateway</body></html>'), 'noAnswer');
	assert.equal(classify(502, undefined, undefined), 'noAnswer');
});

test('send: a proxy 504 is repeated with the same key and ends on the relay\'s answer', async () => {
	const { req, calls } = scripted([
		answer(504, '<html>Gateway Timeout</html>'),
		answer(502, 'Bad Gateway'),
		answer(200, { message_id: '<job-a@x>', state: 'sent' }, { 'Idempotent-Replayed': 'true' }),
	]);
	const r = await send(req, async () => {}, 'http://relay', { key: 'k' }, limits);
	assert.equal(r.outcome, 'sent');
	assert.equal(r.replayed, true);
	assert.equal(calls.length, 3);
	assert.deepEqual(calls[2].body, { key: 'k' });
	const gone = scripted([answer(504, ''), answer(504, ''), answer(504, '')]);
	const g = await send(gone.req, async () => {}, 'http://relay', { key: 'k' }, limits);
	assert.equal(g.outcome, 'retryLater', 'after the repeats: Retry Later, not Needs Fix');
	assert.equal(g.status, 504);
});

test('keyWarnings flags clock, execution and random values, not event fields', () => {
	assert.deepEqual(keyWarnings({ key: '={{ $json.customer_id }}:{{ $json.order_id }}' }), []);
	assert.deepEqual(keyWarnings({ customerId: '={{ $json.id }}', eventType: 'order.shipped', orderId: '={{ $json.order }}' }), []);
	for (const bad of [
		'={{ $now.toISO() }}',
		'={{ $execution.id }}',
		'={{ Math.random() }}',
		'={{ $today }}',
		'={{ Date.now() }}',
		'={{ crypto.randomUUID() }}',
		'={{ $randomInt(1, 9) }}',
	]) {
		const w = keyWarnings({ orderId: bad });
		assert.equal(w.length, 1, bad);
		assert.match(w[0], /orderId/);
	}
});

test('buildBody sends job parts or key, and names an empty part', () => {
	assert.deepEqual(buildBody({ customerId: 'cus_1', eventType: 'order.shipped', orderId: 'ord_1' }, { to: 'a@example.com', subject: 's', text: 't', replyTo: 'r@example.com', cc: '' }), {
		job: { customer_id: 'cus_1', event_type: 'order.shipped', order_id: 'ord_1' },
		to: 'a@example.com',
		subject: 's',
		text: 't',
		reply_to: 'r@example.com',
	});
	assert.deepEqual(buildBody({ key: 'k1' }, { to: 'a@example.com', subject: 's' }), { key: 'k1', to: 'a@example.com', subject: 's' });
	assert.throws(() => buildBody({ customerId: 'c', eventType: ' ', orderId: 'o' }, { to: 'a', subject: 's' }), /Event Type is empty/);
	assert.throws(() => buildBody({ key: '' }, { to: 'a', subject: 's' }), /Idempotency Key is empty/);
});

test('buildBody: undefined, null and whitespace are blank, never the text "undefined"/"null"', () => {
	const m = { to: 'a@example.com', subject: 's' };
	for (const v of [undefined, null, '', '  ']) {
		assert.throws(() => buildBody({ customerId: 'c', eventType: 'e', orderId: v }, m), /Order ID is empty/, String(v));
		assert.throws(() => buildBody({ key: v }, m), /Idempotency Key is empty/, String(v));
		assert.throws(() => buildBody({ key: 'k' }, { to: v, subject: 's' }), /To is empty/, String(v));
		assert.deepEqual(buildBody({ key: 'k' }, { to: 'a@example.com', subject: v }), { key: 'k', to: 'a@example.com' }, 'no subject: sent without one, as Gmail does');
		assert.deepEqual(buildBody({ key: 'k' }, { ...m, text: v, cc: v, threadId: v }), { key: 'k', ...m }, 'blank optional fields left out');
	}
	assert.throws(() => buildBody({ customerId: 'c', eventType: 'e', orderId: { id: 1 } }, m), /Order ID is not text/);
	assert.deepEqual(buildBody({ customerId: 42, eventType: 'e', orderId: 7 }, m).job, { customer_id: '42', event_type: 'e', order_id: '7' });
});

test('send: 200 is sent, a replay is marked replayed, one request', async () => {
	const { req, calls } = scripted([answer(200, { message_id: '<job-a@x>', state: 'sent', replayed: true }, { 'Idempotent-Replayed': 'true' })]);
	const r = await send(req, async () => {}, 'http://relay:8080/', { key: 'k' }, limits);
	assert.equal(r.outcome, 'sent');
	assert.equal(r.replayed, true);
	assert.equal(r.message_id, '<job-a@x>');
	assert.equal(calls.length, 1);
	assert.equal(calls[0].url, 'http://relay:8080/v1/send');
	assert.equal(calls[0].ignoreHttpStatusErrors, true);
});

test('send: a dropped response is repeated once and ends on pending (202)', async () => {
	const { req, calls } = scripted([new Error('socket hang up'), answer(202, { message_id: '<job-a@x>', state: 'unknown' })]);
	const r = await send(req, async () => {}, 'http://relay', { key: 'k' }, limits);
	assert.equal(r.outcome, 'pending');
	assert.equal(r.state, 'unknown');
	assert.equal(r.http_tries, 2);
	assert.deepEqual(calls[1].body, { key: 'k' }, 'the repeat sends the same body (same key)');
});

test('send: 503 and 409 wait Retry-After (capped) and then send', async () => {
	const slept: number[] = [];
	const { req } = scripted([
		answer(503, { error: { code: 'unavailable' } }, { 'retry-after': '1' }),
		answer(409, { error: { code: 'in_flight', message_id: '<job-a@x>' } }, { 'Retry-After': '120' }),
		answer(200, { message_id: '<job-a@x>', state: 'sent' }),
	]);
	const r = await send(req, async (ms) => void slept.push(ms), 'http://relay', { key: 'k' }, limits);
	assert.equal(r.outcome, 'sent');
	assert.deepEqual(slept, [1000, 30000]);
});

test('send: waits are bounded, then Retry Later with the status', async () => {
	const busy = answer(429, { error: { code: 'resource_exhausted' } }, { 'Retry-After': '3' });
	const { req, calls } = scripted([busy, busy, busy]);
	const r = await send(req, async () => {}, 'http://relay', { key: 'k' }, limits);
	assert.equal(r.outcome, 'retryLater');
	assert.equal(r.status, 429);
	assert.equal(calls.length, 3);
});

test('send: no answer at all ends on Retry Later after the repeats', async () => {
	const { req, calls } = scripted([new Error('ECONNREFUSED'), new Error('ECONNREFUSED'), new Error('ECONNREFUSED')]);
	const r = await send(req, async () => {}, 'http://relay', { key: 'k' }, limits);
	assert.equal(r.outcome, 'retryLater');
	assert.match(r.error ?? '', /no answer/);
	assert.equal(calls.length, 3);
});

test('send: 422 and 400 are failed (one request, the relay error kept)', async () => {
	for (const s of [400, 422]) {
		const { req, calls } = scripted([answer(s, { error: { code: 'x', message: 'bad', message_id: '<job-a@x>' } })]);
		const r = await send(req, async () => {}, 'http://relay', { key: 'k' }, limits);
		assert.equal(r.outcome, 'failed');
		assert.equal(calls.length, 1);
		assert.equal(r.status, s);
		assert.equal(r.message_id, '<job-a@x>');
	}
});
