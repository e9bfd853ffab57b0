import assert from 'node:assert/strict';
import { test } from 'node:test';

import type { IExecuteFunctions, IPollFunctions } from 'n8n-workflow';

import { GmailRelayApi } from '../credentials/GmailRelayApi.credentials';
import { GmailRelay } from '../nodes/GmailRelay/GmailRelay.node';
import { poll } from '../nodes/GmailRelayTrigger/poll';
import { GmailRelayTrigger } from '../nodes/GmailRelayTrigger/GmailRelayTrigger.node';
import type { FullResponse, RequestOptions } from '../nodes/GmailRelay/logic';

test('credential: URL and token, Bearer header, test calls /readyz', () => {
	const c = new GmailRelayApi();
	assert.deepEqual(c.properties.map((p) => p.name), ['url', 'apiToken']);
	assert.equal(c.authenticate.properties.headers?.Authorization, '=Bearer {{$credentials.apiToken}}');
	assert.equal(c.test.request.url, '/readyz');
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
		'': { jobs: [{ message_id: '<job-old@x>', state: 'queued', updated_at: '2026-12-03T11:00:00Z' }], next: 'p2' },
		p2: { jobs: [{ message_id: '<job-new@x>', state: 'queued', updated_at: '2026-12-03T11:59:30Z' }], next: '' },
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
