import assert from 'node:assert/strict';
import { test } from 'node:test';

import type { IExecuteFunctions, IPollFunctions } from 'n8n-workflow';
import { NodeApiError, NodeOperationError } from 'n8n-workflow';

import { GmailRelayApi } from '../credentials/GmailRelayApi.credentials';
import { GmailRelay } from '../nodes/GmailRelay/GmailRelay.node';
import { poll } from '../nodes/GmailRelayTrigger/poll';
import { GmailRelayTrigger } from '../nodes/GmailRelayTrigger/GmailRelayTrigger.node';
import type { FullResponse, RequestOptions } from '../nodes/GmailRelay/logic';

test('credential: URL and token, Bearer header, test calls an endpoint that needs the API token', () => {
	const c = new GmailRelayApi();
	assert.deepEqual(c.properties.map((p) => p.name), ['url', 'apiToken']);
	assert.equal(c.authenticate.properties.headers?.Authorization, '=Bearer {{$credentials.apiToken}}');
	// /readyz needs no token, so a wrong token would test OK; GET /v1/jobs answers 401.
	assert.equal(c.test.request.url, '/v1/jobs?limit=1');
});

test('Send node description: four outputs, Retry On Fail not needed', () => {
	const d = new GmailRelay().description;
	assert.equal(d.outputs.length, 4);
	assert.deepEqual(d.outputNames, ['Sent', 'Pending (relay owns it)', 'Retry Later', 'Needs Fix']);
	assert.deepEqual(d.credentials?.map((c) => c.name), ['gmailRelayApi']);
});

/** The node as n8n hands it to execute (what n8n's errors read). */
const sendNode = (parameters: Record<string, unknown>) => ({ id: 'n1', name: 'Send', type: 'n8n-nodes-gmailrelay.gmailRelay', typeVersion: 1, position: [0, 0] as [number, number], parameters });

/**
 * fakeExec builds an IExecuteFunctions with fixed parameters and a mocked
 * HTTP helper; continueOnFail is the node's On Error setting (true:
 * continue, false: stop the workflow).
 */
function fakeExec(params: Record<string, unknown>, items: number, answer: (o: RequestOptions) => FullResponse, continueOnFail = false) {
	const calls: Array<{ cred: string; o: RequestOptions }> = [];
	const hints: unknown[] = [];
	const ctx = {
		getInputData: () => Array.from({ length: items }, (_, i) => ({ json: { i } })),
		getCredentials: async () => ({ url: 'http://relay:8080/', apiToken: 'tok' }),
		getNode: () => sendNode(params),
		continueOnFail: () => continueOnFail,
		getNodeParameter: (name: string, _i: number, fallback?: unknown) => (name in params ? params[name] : fallback),
		addExecutionHints: (...h: unknown[]) => void hints.push(...h),
		helpers: {
			httpRequestWithAuthentication: async function (cred: string, o: RequestOptions) {
				calls.push({ cred, o });
				return answer(o);
			},
		},
	};
	return { ctx: ctx as unknown as IExecuteFunctions, calls, hints };
}

test('Send node execute: routes each item to its output, with the credential; a job in review is Needs Fix', async () => {
	const params = { keySource: 'fields', customerId: 'cus_1', eventType: 'order.shipped', orderId: 'ord_1', to: 'a@example.com', subject: 's', text: 't', additionalFields: { channel: 'billing' }, options: {} };
	let n = 0;
	const answers = [
		{ statusCode: 200, body: { message_id: '<job-1@x>', state: 'sent' } },
		{ statusCode: 202, body: { message_id: '<job-1@x>', state: 'unknown', replayed: true } },
		{ statusCode: 202, body: { message_id: '<job-1@x>', state: 'review', replayed: true } },
	];
	const { ctx, calls, hints } = fakeExec(params, 3, () => ({ headers: {}, ...answers[n++] }));
	const out = await new GmailRelay().execute.call(ctx);
	assert.deepEqual(out.map((o) => o.length), [1, 1, 0, 1]);
	assert.deepEqual(out[1][0].pairedItem, { item: 1 });
	assert.deepEqual(out[3][0].pairedItem, { item: 2 });
	assert.equal(out[3][0].json.state, 'review');
	assert.equal(out[3][0].json.error, undefined, 'a job in review is no error');
	// The node's count of HTTP requests is http_tries; `attempts` is the
	// relay's word for attempts at Gmail and is not in the node's item.
	assert.equal(out[0][0].json.http_tries, 1);
	assert.equal('attempts' in out[0][0].json, false);
	assert.equal(calls[0].cred, 'gmailRelayApi');
	assert.equal(calls[0].o.url, 'http://relay:8080/v1/send');
	assert.deepEqual(calls[0].o.body, { job: { customer_id: 'cus_1', event_type: 'order.shipped', order_id: 'ord_1' }, to: 'a@example.com', subject: 's', text: 't', channel: 'billing' });
	assert.equal(hints.length, 0);
});

test('Send node execute: a $now key gives a warning hint and key_warnings', async () => {
	const params = { keySource: 'key', key: '={{ $json.id }}-{{ $now }}', to: 'a@example.com', subject: 's', text: 't', additionalFields: {}, options: {} };
	const { ctx, hints } = fakeExec(params, 1, () => ({ statusCode: 200, headers: {}, body: { message_id: '<job-1@x>', state: 'sent' } }));
	const out = await new GmailRelay().execute.call(ctx);
	assert.equal(hints.length, 1);
	assert.match(JSON.stringify(hints[0]), /\$now/);
	assert.equal((out[0][0].json.key_warnings as string[]).length, 1);
});

test('Send node execute: a blank key part is a NodeOperationError before any request', async () => {
	const params = { keySource: 'fields', customerId: 'cus_1', eventType: ' ', orderId: 'ord_1', to: 'a@example.com', subject: 's', text: 't', additionalFields: {}, options: {} };
	const stop = fakeExec(params, 1, () => ({ statusCode: 200, headers: {}, body: {} }));
	await assert.rejects(new GmailRelay().execute.call(stop.ctx), (e: unknown) => {
		assert.ok(e instanceof NodeOperationError, 'a NodeOperationError, so the Error Workflow fires');
		assert.match(e.message, /Event Type is empty/);
		assert.equal(e.context.itemIndex, 0);
		assert.equal(e.node.name, 'Send');
		return true;
	});
	assert.equal(stop.calls.length, 0, 'no request for a job without a key');

	const cont = fakeExec(params, 1, () => ({ statusCode: 200, headers: {}, body: {} }), true);
	const out = await new GmailRelay().execute.call(cont.ctx);
	assert.deepEqual(out.map((o) => o.length), [0, 0, 0, 1]);
	assert.equal(cont.calls.length, 0);
	assert.deepEqual(Object.keys(out[3][0].json), ['error'], "n8n's error item: {json: {error}}");
	assert.match(String(out[3][0].json.error), /Event Type is empty/);
	assert.ok(out[3][0].error instanceof NodeOperationError);
	assert.deepEqual(out[3][0].pairedItem, { item: 0 });
});

test('Send node execute: a refusal of the relay is a NodeApiError with its status; items before it were sent', async () => {
	const params = { keySource: 'key', key: '={{ $json.id }}', to: 'a@example.com', subject: 's', text: 't', additionalFields: {}, options: {} };
	const refusal = { statusCode: 400, headers: {}, body: { error: { code: 'invalid_argument', field: 'to', message: 'bad address' } } };
	const ok = { statusCode: 200, headers: {}, body: { message_id: '<job-1@x>', state: 'sent' } };
	let n = 0;
	const stop = fakeExec(params, 3, () => (n++ === 1 ? refusal : ok));
	await assert.rejects(new GmailRelay().execute.call(stop.ctx), (e: unknown) => {
		assert.ok(e instanceof NodeApiError, 'a NodeApiError, so the Error Workflow fires');
		assert.equal(e.httpCode, '400');
		assert.equal(e.message, 'gmailrelay refused the e-mail: 400 invalid_argument, field to');
		assert.equal(e.description, 'bad address');
		assert.equal(e.context.itemIndex, 1);
		return true;
	});
	assert.equal(stop.calls.length, 2, 'item 0 sent, item 1 refused, item 2 not tried: running again replays item 0');

	for (const [status, body] of [
		[422, { error: { code: 'idempotency_mismatch', field: 'key', message: 'this key was already used for a message with different content' } }],
		[502, { error: { code: 'provider_rejected', message: 'Gmail rejected it' } }],
		[401, { error: { code: 'unauthorized', message: 'missing or wrong token' } }],
	] as const) {
		const one = fakeExec(params, 1, () => ({ statusCode: status, headers: {}, body }));
		await assert.rejects(new GmailRelay().execute.call(one.ctx), (e: unknown) => e instanceof NodeApiError && e.httpCode === String(status));
	}
});

test('Send node execute: with On Error = continue, a refusal is an error item on Needs Fix and the next item is sent', async () => {
	const params = { keySource: 'key', key: '={{ $json.id }}', to: 'a@example.com', subject: 's', text: 't', additionalFields: {}, options: {} };
	let n = 0;
	const { ctx, calls } = fakeExec(
		params,
		3,
		() => (n++ === 1 ? { statusCode: 422, headers: {}, body: { error: { code: 'idempotency_mismatch', field: 'key', message: 'used for another message' } } } : { statusCode: 200, headers: {}, body: { message_id: '<job-1@x>', state: 'sent' } }),
		true,
	);
	const out = await new GmailRelay().execute.call(ctx);
	assert.equal(calls.length, 3);
	assert.deepEqual(out.map((o) => o.length), [2, 0, 0, 1]);
	assert.deepEqual(out[0].map((o) => o.pairedItem), [{ item: 0 }, { item: 2 }]);
	assert.ok(out[0].every((o) => o.json.error === undefined), 'Sent carries no error item');
	const e = out[3][0];
	assert.deepEqual(e.pairedItem, { item: 1 });
	assert.deepEqual(e.json, { error: 'gmailrelay refused the e-mail: 422 idempotency_mismatch, field key' });
	assert.ok(e.error instanceof NodeApiError);
	assert.equal((e.error as NodeApiError).httpCode, '422');
});

test('Send node execute: an empty subject is sent without one (Gmail and the relay send it)', async () => {
	const params = { keySource: 'key', key: 'k1', to: 'a@example.com', subject: '', text: 't', additionalFields: {}, options: {} };
	const { ctx, calls } = fakeExec(params, 1, () => ({ statusCode: 200, headers: {}, body: { message_id: '<job-1@x>', state: 'sent' } }));
	const out = await new GmailRelay().execute.call(ctx);
	assert.deepEqual(out.map((o) => o.length), [1, 0, 0, 0]);
	assert.deepEqual(calls[0].o.body, { key: 'k1', to: 'a@example.com', text: 't' });
	const subject = new GmailRelay().description.properties.find((p) => p.name === 'subject');
	assert.notEqual(subject?.required, true, 'Subject is not a required parameter');
});

/**
 * perItemExec builds an IExecuteFunctions whose parameters are evaluated per
 * item, as n8n's expressions are: value(name, i) may give undefined or null
 * (a missing or null field) or throw (an expression n8n cannot evaluate).
 */
function perItemExec(
	items: number,
	value: (name: string, i: number) => unknown,
	answer: (o: RequestOptions) => FullResponse = () => ({ statusCode: 200, headers: {}, body: { message_id: '<job@x>', state: 'sent' } }),
	continueOnFail = true,
) {
	const calls: RequestOptions[] = [];
	const ctx = {
		getInputData: () => Array.from({ length: items }, (_, i) => ({ json: { i } })),
		getCredentials: async () => ({ url: 'http://relay:8080', apiToken: 'tok' }),
		getNode: () => sendNode({ keySource: 'fields', customerId: '={{ $json.customer }}', eventType: 'order.shipped', orderId: '={{ $json.orderId }}' }),
		continueOnFail: () => continueOnFail,
		getNodeParameter: (name: string, i: number, fallback?: unknown) => {
			const v = value(name, i);
			return v === undefined && fallback !== undefined ? fallback : v;
		},
		addExecutionHints: () => {},
		helpers: {
			httpRequestWithAuthentication: async function (_cred: string, o: RequestOptions) {
				calls.push(o);
				return answer(o);
			},
		},
	};
	return { ctx: ctx as unknown as IExecuteFunctions, calls };
}

test('Send node execute: a missing or null field in a key or To expression is an error item, never "undefined"', async () => {
	// Items 0 and 1: {{ $json.orderId }} gives undefined (field renamed) and
	// null; sent as order "undefined" / "null" they would be two different
	// orders under one key, the second a replay on Sent. A null Subject is
	// no subject (item 3 is sent without one). On Error = continue here.
	const perItem: Array<Record<string, unknown>> = [
		{ orderId: undefined },
		{ orderId: null },
		{ to: undefined },
		{ subject: null },
		{ text: undefined, additionalFields: { cc: null, html: undefined } },
	];
	const { ctx, calls } = perItemExec(perItem.length, (name, i) => {
		const base: Record<string, unknown> = { keySource: 'fields', customerId: 'cus_9', eventType: 'order.shipped', orderId: `ord_${i}`, to: 'ada@example.com', subject: 'Shipped', text: 't', additionalFields: {}, options: {} };
		const item = perItem[i];
		return name in item ? item[name] : base[name];
	});
	const out = await new GmailRelay().execute.call(ctx);
	assert.deepEqual(out.map((o) => o.length), [2, 0, 0, 3]);
	const fix = out[3].map((o) => [o.pairedItem, String(o.json.error).split(' is empty')[0]]);
	assert.deepEqual(fix, [
		[{ item: 0 }, 'Order ID'],
		[{ item: 1 }, 'Order ID'],
		[{ item: 2 }, 'To'],
	]);
	assert.equal(calls.length, 2, 'only the items with a key and a recipient are sent');
	assert.deepEqual(calls[0].body, { job: { customer_id: 'cus_9', event_type: 'order.shipped', order_id: 'ord_3' }, to: 'ada@example.com', text: 't' }, 'no subject');
	assert.deepEqual(calls[1].body, { job: { customer_id: 'cus_9', event_type: 'order.shipped', order_id: 'ord_4' }, to: 'ada@example.com', subject: 'Shipped' }, 'blank optional fields are left out, not "undefined"');
	assert.doesNotMatch(JSON.stringify(calls.map((c) => c.body)), /undefined|null/);
});

test('Send node execute: an error reading item k\'s parameters is k\'s error: continue sends the rest, stop names item k', async () => {
	// Were the error to escape execute() after item 0 was sent, n8n with On
	// Error = Continue would put every input item on Sent.
	const value = (name: string, i: number) => {
		if (name === 'customerId' && i === 1) {
			throw new Error("Referenced node doesn't exist: Lookup customer");
		}
		const base: Record<string, unknown> = { keySource: 'fields', customerId: `c${i}`, eventType: 'order.shipped', orderId: `B-${i}`, to: 'a@example.com', subject: 's', text: 't', additionalFields: {}, options: {} };
		return base[name];
	};
	const { ctx, calls } = perItemExec(3, value);
	const out = await new GmailRelay().execute.call(ctx);
	assert.deepEqual(out.map((o) => o.length), [2, 0, 0, 1]);
	assert.deepEqual(out[0].map((o) => o.pairedItem), [{ item: 0 }, { item: 2 }]);
	assert.deepEqual(out[3][0].pairedItem, { item: 1 });
	assert.match(String(out[3][0].json.error), /Lookup customer/);
	assert.ok(out[3][0].error instanceof NodeOperationError);
	assert.equal(calls.length, 2);

	const stop = perItemExec(3, value, undefined, false);
	await assert.rejects(new GmailRelay().execute.call(stop.ctx), (e: unknown) => e instanceof NodeOperationError && e.context.itemIndex === 1 && /Lookup customer/.test(e.message));
	assert.equal(stop.calls.length, 1, 'item 0 was sent before the error; item 2 was not tried');
});

test('Send node execute: credentials that cannot be read fail the node before anything is sent', async () => {
	const { ctx, calls } = perItemExec(2, (name) => ({ keySource: 'key', key: 'k', to: 'a@example.com', subject: 's' })[name]);
	(ctx as unknown as { getCredentials: () => Promise<unknown> }).getCredentials = async () => {
		throw new Error('Credentials not found');
	};
	await assert.rejects(new GmailRelay().execute.call(ctx), /Credentials not found/);
	assert.equal(calls.length, 0);
});

test('package: credential and node descriptions pass what n8n reads (icons, usableAsTool, main inputs)', () => {
	assert.equal(new GmailRelayApi().icon, 'file:gmailrelay.svg');
	const d = new GmailRelay().description;
	assert.equal(d.usableAsTool, true);
	assert.deepEqual(d.inputs, ['main']);
	assert.deepEqual(new GmailRelayTrigger().description.outputs, ['main']);
});

test('Trigger poll: emits a review job once, again after it re-enters; queued is optional', async () => {
	let review: unknown[] = [{ message_id: '<job-r@x>', state: 'review', channel: 'billing' }];
	const req = async (o: RequestOptions): Promise<FullResponse> => {
		if (o.url.includes('state=queued')) {
			return { statusCode: 400, headers: {}, body: { error: { code: 'invalid_argument', field: 'state', message: 'unknown state "queued"' } } };
		}
		return { statusCode: 200, headers: {}, body: { jobs: review, next: '' } };
	};
	const o = { includeQueued: true, queuedOlderThanMs: 60_000, maxPages: 2 };
	const now = new Date();
	const first = await poll(req, 'http://relay/', o, {}, now, false);
	assert.equal(first.jobs.length, 1);
	// A human's links go to the console's page of the job; the API's are second.
	assert.equal(first.jobs[0].url, 'http://relay/ui/jobs/%3Cjob-r%40x%3E');
	assert.equal(first.jobs[0].resolve_url, 'http://relay/ui/jobs/%3Cjob-r%40x%3E');
	assert.equal(first.jobs[0].api_url, 'http://relay/v1/jobs/%3Cjob-r%40x%3E');
	assert.equal(first.jobs[0].api_resolve_url, 'http://relay/v1/jobs/%3Cjob-r%40x%3E/resolve');
	assert.equal(first.queuedUnavailable, true);
	const second = await poll(req, 'http://relay', o, first.seen, now, false);
	assert.equal(second.jobs.length, 0, 'already emitted');
	review = [];
	const third = await poll(req, 'http://relay', o, second.seen, now, false);
	review = [{ message_id: '<job-r@x>', state: 'review' }];
	const fourth = await poll(req, 'http://relay', o, third.seen, now, false);
	assert.equal(fourth.jobs.length, 1, 'left review and came back');
	const manual = await poll(req, 'http://relay', o, fourth.seen, now, true);
	assert.equal(manual.jobs.length, 1, 'manual mode shows current jobs');
});

test('Trigger poll: queued jobs past the threshold, pages followed', async () => {
	const now = new Date('2026-12-03T12:00:00Z');
	const pages: Record<string, unknown> = {
		'': { jobs: [{ message_id: '<job-old@x>', state: 'queued', created_at: '2026-12-03T11:00:00Z', updated_at: '2026-12-03T11:00:00Z' }], next: 'p2' },
		p2: { jobs: [{ message_id: '<job-new@x>', state: 'queued', created_at: '2026-12-03T11:59:30Z', updated_at: '2026-12-03T11:59:30Z' }], next: '' },
	};
	const req = async (o: RequestOptions): Promise<FullResponse> => {
		const u = new URL(o.url);
		if (u.searchParams.get('state') === 'review') {
			return { statusCode: 200, headers: {}, body: { jobs: [] } };
		}
		return { statusCode: 200, headers: {}, body: pages[u.searchParams.get('after') ?? ''] };
	};
	const r = await poll(req, 'http://relay', { includeQueued: true, queuedOlderThanMs: 15 * 60_000, maxPages: 5 }, {}, now, false);
	assert.deepEqual(r.jobs.map((j) => [j.message_id, j.reason]), [['<job-old@x>', 'queued too long']]);
});

test('Trigger poll: queued too long counts from created_at or send_at, not from updated_at', async () => {
	const now = new Date('2026-12-03T12:00:00Z');
	const queued = [
		// Gmail unreachable for an hour: each outbox retry rewrote updated_at.
		{ message_id: '<job-stuck@x>', state: 'queued', created_at: '2026-12-03T11:00:00Z', updated_at: '2026-12-03T11:59:50Z' },
		// Accepted an hour ago for 12:10: scheduled, not late.
		{ message_id: '<job-later@x>', state: 'queued', created_at: '2026-12-03T11:00:00Z', send_at: '2026-12-03T12:10:00Z', updated_at: '2026-12-03T11:00:00Z' },
		// Due at 11:30 and still queued: late.
		{ message_id: '<job-due@x>', state: 'queued', created_at: '2026-12-03T10:00:00Z', send_at: '2026-12-03T11:30:00Z', updated_at: '2026-12-03T11:59:00Z' },
		// Due 5 min ago: not yet past 15 min.
		{ message_id: '<job-soon@x>', state: 'queued', created_at: '2026-12-03T10:00:00Z', send_at: '2026-12-03T11:55:00Z', updated_at: '2026-12-03T10:00:00Z' },
	];
	const req = async (o: RequestOptions): Promise<FullResponse> => {
		const state = new URL(o.url).searchParams.get('state');
		return { statusCode: 200, headers: {}, body: { jobs: state === 'queued' ? queued : [] } };
	};
	const r = await poll(req, 'http://relay', { includeQueued: true, queuedOlderThanMs: 15 * 60_000, maxPages: 5 }, {}, now, false);
	assert.deepEqual(r.jobs.map((j) => j.message_id), ['<job-stuck@x>', '<job-due@x>']);
});

test('Trigger node poll: follows next past 10 pages (1,500 review jobs), and reports a cap that is hit', async () => {
	// Before the fix the node read 10 pages: with more than 1,000 review jobs,
	// those past them in Message-ID order were never emitted.
	const staticData: Record<string, unknown> = {};
	const warned: string[] = [];
	let requests = 0;
	const ctx = {
		getCredentials: async () => ({ url: 'http://relay', apiToken: 'tok' }),
		getWorkflowStaticData: () => staticData,
		getNodeParameter: (_n: string, fallback: unknown) => fallback,
		getMode: () => 'trigger',
		logger: { warn: (m: string) => void warned.push(m), info: () => {}, debug: () => {}, error: () => {} },
		helpers: {
			httpRequestWithAuthentication: async (_c: string, o: RequestOptions) => {
				requests++;
				const page = Number(new URL(o.url).searchParams.get('after') ?? '0');
				const jobs = Array.from({ length: 100 }, (_, k) => ({ message_id: `<job-${page * 100 + k}@x>`, state: 'review' }));
				return { statusCode: 200, headers: {}, body: { jobs, next: page < 14 ? String(page + 1) : '' } };
			},
			returnJsonArray: (a: unknown[]) => a.map((json) => ({ json })),
		},
	} as unknown as IPollFunctions;
	const first = await new GmailRelayTrigger().poll.call(ctx);
	assert.equal(first?.[0].length, 1500);
	assert.equal(requests, 15);
	assert.deepEqual(warned, []);

	const endless = async (o: RequestOptions): Promise<FullResponse> => {
		const page = Number(new URL(o.url).searchParams.get('after') ?? '0');
		return { statusCode: 200, headers: {}, body: { jobs: [{ message_id: `<job-${page}@x>`, state: 'review' }], next: String(page + 1) } };
	};
	const r = await poll(endless, 'http://relay', { includeQueued: false, queuedOlderThanMs: 0, maxPages: 3 }, {}, new Date(), false);
	assert.equal(r.jobs.length, 3);
	assert.deepEqual(r.truncated, ['review']);
});

test('Trigger node poll: uses static data and returns null when nothing is new', async () => {
	const staticData: Record<string, unknown> = {};
	const ctx = {
		getCredentials: async () => ({ url: 'http://relay', apiToken: 'tok' }),
		getWorkflowStaticData: () => staticData,
		getNodeParameter: (_n: string, fallback: unknown) => fallback,
		getMode: () => 'trigger',
		helpers: {
			httpRequestWithAuthentication: async () => ({ statusCode: 200, headers: {}, body: { jobs: [{ message_id: '<job-r@x>', state: 'review' }] } }),
			returnJsonArray: (a: unknown[]) => a.map((json) => ({ json })),
		},
	} as unknown as IPollFunctions;
	const t = new GmailRelayTrigger();
	const first = await t.poll.call(ctx);
	assert.equal(first?.[0].length, 1);
	assert.equal(await t.poll.call(ctx), null);
});

test('Trigger node poll: a relay error (401: a wrong token) is a NodeApiError with its status', async () => {
	const ctx = {
		getCredentials: async () => ({ url: 'http://relay', apiToken: 'wrong' }),
		getWorkflowStaticData: () => ({}),
		getNodeParameter: (_n: string, fallback: unknown) => fallback,
		getMode: () => 'trigger',
		getNode: () => ({ id: 't1', name: 'gmailrelay Trigger', type: 'n8n-nodes-gmailrelay.gmailRelayTrigger', typeVersion: 1, position: [0, 0], parameters: {} }),
		helpers: {
			httpRequestWithAuthentication: async () => ({ statusCode: 401, headers: {}, body: { error: { code: 'unauthorized', message: 'missing or wrong API token' } } }),
			returnJsonArray: (a: unknown[]) => a.map((json) => ({ json })),
		},
	} as unknown as IPollFunctions;
	await assert.rejects(new GmailRelayTrigger().poll.call(ctx), (e: unknown) => {
		assert.ok(e instanceof NodeApiError);
		assert.equal(e.httpCode, '401');
		assert.match(e.message, /GET \/v1\/jobs\?state=review: 401 missing or wrong API token/);
		return true;
	});
});
