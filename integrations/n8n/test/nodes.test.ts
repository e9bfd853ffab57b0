import assert from 'node:assert/strict';
import { test } from 'node:test';

import type { IExecuteFunctions, IPollFunctions } from 'n8n-workflow';

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

/** fakeExec builds an IExecuteFunctions with fixed parameters and a mocked HTTP helper. */
function fakeExec(params: Record<string, unknown>, items: number, answer: (o: RequestOptions) => FullResponse) {
	const calls: Array<{ cred: string; o: RequestOptions }> = [];
	const hints: unknown[] = [];
	const ctx = {
		getInputData: () => Array.from({ length: items }, (_, i) => ({ json: { i } })),
		getCredentials: async () => ({ url: 'http://relay:8080/', apiToken: 'tok' }),
		getNode: () => ({ name: 'Send', parameters: params }),
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

test('Send node execute: routes each item to its output, with the credential', async () => {
	const params = { keySource: 'fields', customerId: 'cus_1', eventType: 'order.shipped', orderId: 'ord_1', to: 'a@example.com', subject: 's', text: 't', additionalFields: { channel: 'billing' }, options: {} };
	let n = 0;
	const statuses = [200, 202, 422];
	const { ctx, calls, hints } = fakeExec(params, 3, () => ({ statusCode: statuses[n++], headers: {}, body: { message_id: '<job-1@x>', state: 'sent' } }));
	const out = await new GmailRelay().execute.call(ctx);
	assert.deepEqual(out.map((o) => o.length), [1, 1, 0, 1]);
	assert.deepEqual(out[1][0].pairedItem, { item: 1 });
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

test('Send node execute: a blank key part goes to Needs Fix without a request', async () => {
	const params = { keySource: 'fields', customerId: 'cus_1', eventType: ' ', orderId: 'ord_1', to: 'a@example.com', subject: 's', text: 't', additionalFields: {}, options: {} };
	const { ctx, calls } = fakeExec(params, 1, () => ({ statusCode: 200, headers: {}, body: {} }));
	const out = await new GmailRelay().execute.call(ctx);
	assert.deepEqual(out.map((o) => o.length), [0, 0, 0, 1]);
	assert.equal(calls.length, 0, 'no request for a job without a key');
	assert.match(String(out[3][0].json.error), /Event Type is empty/);
	assert.deepEqual(out[3][0].pairedItem, { item: 0 });
});

/**
 * perItemExec builds an IExecuteFunctions whose parameters are evaluated per
 * item, as n8n's expressions are: value(name, i) may give undefined or null
 * (a missing or null field) or throw (an expression n8n cannot evaluate).
 */
function perItemExec(items: number, value: (name: string, i: number) => unknown, answer: (o: RequestOptions) => FullResponse = () => ({ statusCode: 200, headers: {}, body: { message_id: '<job@x>', state: 'sent' } })) {
	const calls: RequestOptions[] = [];
	const ctx = {
		getInputData: () => Array.from({ length: items }, (_, i) => ({ json: { i } })),
		getCredentials: async () => ({ url: 'http://relay:8080', apiToken: 'tok' }),
		getNode: () => ({ name: 'Send', parameters: { keySource: 'fields', customerId: '={{ $json.customer }}', eventType: 'order.shipped', orderId: '={{ $json.orderId }}' } }),
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

test('Send node execute: a missing or null field in a key, To or Subject expression goes to Needs Fix, never "undefined"', async () => {
	// Items 0 and 1: {{ $json.orderId }} gives undefined (field renamed) and
	// null. Before the fix both were sent as order "undefined" / "null": two
	// different orders under one key, the second a replay on Sent.
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
	assert.deepEqual(out.map((o) => o.length), [1, 0, 0, 4]);
	const fix = out[3].map((o) => [o.pairedItem, String(o.json.error).split(' is empty')[0]]);
	assert.deepEqual(fix, [
		[{ item: 0 }, 'Order ID'],
		[{ item: 1 }, 'Order ID'],
		[{ item: 2 }, 'To'],
		[{ item: 3 }, 'Subject'],
	]);
	assert.equal(calls.length, 1, 'only the complete item is sent');
	assert.deepEqual(calls[0].body, { job: { customer_id: 'cus_9', event_type: 'order.shipped', order_id: 'ord_4' }, to: 'ada@example.com', subject: 'Shipped' }, 'blank optional fields are left out, not "undefined"');
	assert.doesNotMatch(JSON.stringify(calls.map((c) => c.body)), /undefined|null/);
});

test('Send node execute: an error reading item k\'s parameters sends Needs Fix for k and still sends the rest', async () => {
	// Before the fix the error aborted execute() after item 0 was sent, and
	// with On Error = Continue n8n put every input item on Sent.
	const { ctx, calls } = perItemExec(3, (name, i) => {
		if (name === 'customerId' && i === 1) {
			throw new Error("Referenced node doesn't exist: Lookup customer");
		}
		const base: Record<string, unknown> = { keySource: 'fields', customerId: `c${i}`, eventType: 'order.shipped', orderId: `B-${i}`, to: 'a@example.com', subject: 's', text: 't', additionalFields: {}, options: {} };
		return base[name];
	});
	const out = await new GmailRelay().execute.call(ctx);
	assert.deepEqual(out.map((o) => o.length), [2, 0, 0, 1]);
	assert.deepEqual(out[0].map((o) => o.pairedItem), [{ item: 0 }, { item: 2 }]);
	assert.deepEqual(out[3][0].pairedItem, { item: 1 });
	assert.match(String(out[3][0].json.error), /Lookup customer/);
	assert.equal(calls.length, 2);
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
	assert.equal(first.jobs[0].url, 'http://relay/v1/jobs/%3Cjob-r%40x%3E');
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
