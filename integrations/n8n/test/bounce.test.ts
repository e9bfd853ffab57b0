import assert from 'node:assert/strict';
import { test } from 'node:test';

import type { IPollFunctions } from 'n8n-workflow';

import type { FullResponse, RequestOptions } from '../nodes/GmailRelay/logic';
import { poll, type PollOptions } from '../nodes/GmailRelayTrigger/poll';
import { GmailRelayTrigger } from '../nodes/GmailRelayTrigger/GmailRelayTrigger.node';

// The Trigger's bounced jobs against a mocked relay: GET /v1/jobs?state=
// review, GET /v1/jobs?delivery=bounced (pages of `per` jobs, `next` the
// index of the next page), and GET /v1/jobs/{id} with the job's delivery.

interface Bounced {
	message_id: string;
	bounced: number;
	to: string[];
	failed: string[];
}

function fakeRelay(opts: { per?: number; old?: '400' | 'ignores' } = {}) {
	const relay = {
		review: [] as unknown[],
		bounced: [] as Bounced[],
		urls: [] as string[],
		req: async (o: RequestOptions): Promise<FullResponse> => {
			relay.urls.push(o.url);
			const u = new URL(o.url);
			if (u.pathname.startsWith('/v1/jobs/')) {
				const id = decodeURIComponent(u.pathname.slice('/v1/jobs/'.length));
				const j = relay.bounced.find((b) => b.message_id === id);
				if (!j) {
					return { statusCode: 404, headers: {}, body: { error: { code: 'not_found', message: 'no such job' } } };
				}
				const delivery = { state: j.failed.length === j.to.length ? 'bounced' : 'partly_bounced', bounced: j.failed, delayed: [] };
				return { statusCode: 200, headers: {}, body: { message_id: id, state: 'sent', delivery, lines: [] } };
			}
			const delivery = u.searchParams.get('delivery');
			if (delivery === null) {
				return { statusCode: 200, headers: {}, body: { jobs: relay.review, next: '' } };
			}
			if (opts.old === '400') {
				return { statusCode: 400, headers: {}, body: { error: { code: 'invalid_argument', field: 'delivery', message: 'unknown parameter' } } };
			}
			if (opts.old === 'ignores') {
				// A relay without the filter lists every job, none with a bounced count.
				const all = Array.from({ length: 100 }, (_, k) => ({ message_id: `<job-${k}@x>`, state: 'sent' }));
				return { statusCode: 200, headers: {}, body: { jobs: all, next: 'more' } };
			}
			const per = opts.per ?? 100;
			const from = Number(u.searchParams.get('after') ?? '0');
			const page = relay.bounced.slice(from, from + per).map((b) => ({ message_id: b.message_id, state: 'sent', to: b.to, bounced: b.bounced }));
			const next = from + per < relay.bounced.length ? String(from + per) : '';
			return { statusCode: 200, headers: {}, body: { jobs: page, next } };
		},
	};
	return relay;
}

const on: PollOptions = { includeQueued: false, queuedOlderThanMs: 0, includeBounced: true, maxPages: 10 };
const now = new Date('2026-12-06T12:00:00Z');

test('Trigger poll: a bounced job is emitted once, again when more recipients bounce, not otherwise', async () => {
	const relay = fakeRelay();
	const a: Bounced = { message_id: '<job-a@x>', bounced: 1, to: ['ok@example.org', 'x@bounce.test', 'y@bounce.test'], failed: ['x@bounce.test'] };
	relay.bounced = [a];
	const first = await poll(relay.req, 'http://relay/', on, {}, now, false);
	assert.equal(first.jobs.length, 1);
	const j = first.jobs[0];
	assert.equal(j.reason, 'bounced');
	assert.equal(j.state, 'sent', 'a bounced job stays sent');
	assert.equal(j.bounced, 1);
	assert.deepEqual(j.delivery, { state: 'partly_bounced', bounced: ['x@bounce.test'], delayed: [] });
	assert.equal(j.url, 'http://relay/ui/jobs/%3Cjob-a%40x%3E');
	assert.equal(j.api_url, 'http://relay/v1/jobs/%3Cjob-a%40x%3E');
	assert.deepEqual(first.seenBounced, { '<job-a@x>': 1 });
	assert.equal(first.bouncedUnavailable, undefined);

	const second = await poll(relay.req, 'http://relay', on, first.seen, now, false, first.seenBounced);
	assert.equal(second.jobs.length, 0, 'same count: already emitted');
	assert.equal(relay.urls.filter((u) => u.includes('/v1/jobs/%3C')).length, 1, 'the job view is read only for an emitted job');

	// A later report for another recipient.
	a.bounced = 2;
	a.failed = ['x@bounce.test', 'y@bounce.test'];
	const third = await poll(relay.req, 'http://relay', on, second.seen, now, false, second.seenBounced);
	assert.deepEqual(
		third.jobs.map((x) => [x.message_id, x.reason, x.bounced]),
		[['<job-a@x>', 'bounced', 2]],
	);
	assert.deepEqual(third.jobs[0].delivery?.bounced, ['x@bounce.test', 'y@bounce.test']);
	const fourth = await poll(relay.req, 'http://relay', on, third.seen, now, false, third.seenBounced);
	assert.equal(fourth.jobs.length, 0);

	// A second job bounces: only it is new; a job no longer listed is forgotten.
	const b: Bounced = { message_id: '<job-b@x>', bounced: 1, to: ['z@bounce.test'], failed: ['z@bounce.test'] };
	relay.bounced = [b];
	const fifth = await poll(relay.req, 'http://relay', on, fourth.seen, now, false, fourth.seenBounced);
	assert.deepEqual(fifth.jobs.map((x) => x.message_id), ['<job-b@x>']);
	assert.equal(fifth.jobs[0].delivery?.state, 'bounced');
	assert.deepEqual(fifth.seenBounced, { '<job-b@x>': 1 }, 'the memory keeps only jobs still listed');
});

test('Trigger poll: review and bounced jobs in one poll, each with its reason; bounces off reads no bounce listing', async () => {
	const relay = fakeRelay();
	relay.review = [{ message_id: '<job-r@x>', state: 'review' }];
	relay.bounced = [{ message_id: '<job-a@x>', bounced: 1, to: ['x@bounce.test'], failed: ['x@bounce.test'] }];
	const r = await poll(relay.req, 'http://relay', on, {}, now, false);
	assert.deepEqual(r.jobs.map((j) => [j.message_id, j.reason]), [['<job-r@x>', 'review'], ['<job-a@x>', 'bounced']]);
	assert.deepEqual(r.seen, { '<job-r@x>': 'review' });

	const off = fakeRelay();
	off.bounced = relay.bounced;
	const r2 = await poll(off.req, 'http://relay', { ...on, includeBounced: false }, {}, now, false);
	assert.equal(r2.jobs.length, 0);
	assert.deepEqual(off.urls, ['http://relay/v1/jobs?state=review&limit=100']);
	assert.deepEqual(r2.seenBounced, {});
});

test('Trigger poll: manual mode shows every bounced job and changes no memory', async () => {
	const relay = fakeRelay();
	relay.bounced = [
		{ message_id: '<job-a@x>', bounced: 1, to: ['x@bounce.test'], failed: ['x@bounce.test'] },
		{ message_id: '<job-b@x>', bounced: 2, to: ['y@bounce.test', 'z@bounce.test'], failed: ['y@bounce.test', 'z@bounce.test'] },
	];
	const seenBounced = { '<job-a@x>': 1, '<job-b@x>': 2 };
	const m = await poll(relay.req, 'http://relay', on, {}, now, true, seenBounced);
	assert.deepEqual(m.jobs.map((j) => [j.message_id, j.reason]), [['<job-a@x>', 'bounced'], ['<job-b@x>', 'bounced']]);
	assert.equal(m.seenBounced, seenBounced, 'memory unchanged');
	const empty = await poll(relay.req, 'http://relay', on, {}, now, true, {});
	assert.deepEqual(empty.seenBounced, {}, 'a test poll does not mark jobs as emitted');
});

test('Trigger poll: a relay that cannot list bounced jobs is skipped, review jobs still emitted', async () => {
	for (const old of ['400', 'ignores'] as const) {
		const relay = fakeRelay({ old });
		relay.review = [{ message_id: '<job-r@x>', state: 'review' }];
		const r = await poll(relay.req, 'http://relay', on, {}, now, false, { '<job-a@x>': 1 });
		assert.equal(r.bouncedUnavailable, true, old);
		assert.deepEqual(r.jobs.map((j) => j.reason), ['review'], `${old}: no job of the unfiltered listing is taken for a bounce`);
		assert.deepEqual(r.seenBounced, {});
		assert.equal(r.truncated, undefined);
		assert.equal(relay.urls.filter((u) => u.includes('delivery=')).length, 1, `${old}: one page read, not the whole log`);
	}
});

test('Trigger poll: bounced pages are followed; the page cap is reported as truncated', async () => {
	const relay = fakeRelay({ per: 2 });
	relay.bounced = Array.from({ length: 5 }, (_, k) => ({ message_id: `<job-${k}@x>`, bounced: 1, to: ['x@bounce.test'], failed: ['x@bounce.test'] }));
	const all = await poll(relay.req, 'http://relay', on, {}, now, false);
	assert.equal(all.jobs.length, 5);
	assert.equal(all.truncated, undefined);
	assert.deepEqual(
		relay.urls.filter((u) => u.includes('delivery=')),
		['http://relay/v1/jobs?delivery=bounced&limit=100', 'http://relay/v1/jobs?delivery=bounced&limit=100&after=2', 'http://relay/v1/jobs?delivery=bounced&limit=100&after=4'],
	);
	const capped = await poll(relay.req, 'http://relay', { ...on, maxPages: 2 }, {}, now, false);
	assert.equal(capped.jobs.length, 4);
	assert.deepEqual(capped.truncated, ['bounced']);
});

test('Trigger poll: a job view the relay does not answer fails the poll (nothing marked emitted)', async () => {
	const relay = fakeRelay();
	relay.bounced = [{ message_id: '<job-a@x>', bounced: 1, to: ['x@bounce.test'], failed: ['x@bounce.test'] }];
	const req = async (o: RequestOptions): Promise<FullResponse> =>
		o.url.includes('/v1/jobs/%3C') ? { statusCode: 503, headers: {}, body: { error: { code: 'unavailable', message: 'busy' } } } : relay.req(o);
	await assert.rejects(poll(req, 'http://relay', on, {}, now, false), /GET \/v1\/jobs\/%3Cjob-a%40x%3E: 503 busy/);
});

/** pollCtx is an IPollFunctions with the given parameters and static data, on relay. */
function pollCtx(params: Record<string, unknown>, staticData: Record<string, unknown>, relay: ReturnType<typeof fakeRelay>, warned: string[] = []) {
	return {
		getCredentials: async () => ({ url: 'http://relay', apiToken: 'tok' }),
		getWorkflowStaticData: () => staticData,
		getNodeParameter: (n: string, fallback: unknown) => (n in params ? params[n] : fallback),
		getMode: () => 'trigger',
		logger: { warn: (m: string) => void warned.push(m), info: () => {}, debug: () => {}, error: () => {} },
		helpers: {
			httpRequestWithAuthentication: async (_c: string, o: RequestOptions) => relay.req(o),
			returnJsonArray: (a: unknown[]) => a.map((json) => ({ json })),
		},
	} as unknown as IPollFunctions;
}

test('Trigger node: Include Bounced Jobs is off by default; on, bounces persist in static data', async () => {
	const prop = new GmailRelayTrigger().description.properties.find((p) => p.name === 'includeBounced');
	assert.equal(prop?.type, 'boolean');
	assert.equal(prop?.default, false, 'off: a workflow saved before the option keeps emitting only what it did');

	const relay = fakeRelay();
	relay.bounced = [{ message_id: '<job-a@x>', bounced: 1, to: ['x@bounce.test'], failed: ['x@bounce.test'] }];
	assert.equal(await new GmailRelayTrigger().poll.call(pollCtx({}, {}, relay)), null, 'default: no bounce emitted');
	assert.equal(relay.urls.some((u) => u.includes('delivery=')), false);

	const data: Record<string, unknown> = {};
	const t = new GmailRelayTrigger();
	const first = await t.poll.call(pollCtx({ includeBounced: true }, data, relay));
	assert.equal(first?.[0].length, 1);
	assert.equal(first?.[0][0].json.reason, 'bounced');
	assert.deepEqual((first?.[0][0].json.delivery as { bounced: string[] }).bounced, ['x@bounce.test']);
	assert.deepEqual(data.seenBounced, { '<job-a@x>': 1 });
	assert.equal(await t.poll.call(pollCtx({ includeBounced: true }, data, relay)), null, 'not again');
	relay.bounced[0].bounced = 2;
	assert.equal((await t.poll.call(pollCtx({ includeBounced: true }, data, relay)))?.[0].length, 1, 'again when the count grows');
});

test('Trigger node: an old relay with bounces on logs a warning and still emits review jobs', async () => {
	const relay = fakeRelay({ old: '400' });
	relay.review = [{ message_id: '<job-r@x>', state: 'review' }];
	const warned: string[] = [];
	const out = await new GmailRelayTrigger().poll.call(pollCtx({ includeBounced: true }, {}, relay, warned));
	assert.deepEqual(out?.[0].map((i) => i.json.reason), ['review']);
	assert.equal(warned.length, 1);
	assert.match(warned[0], /cannot list bounced jobs/);
});

test('notify-on-bounce example: the guide shows the file; it uses the Trigger with bounces on and filters reason "bounced"', async () => {
	const { readFileSync } = await import('node:fs');
	const { resolve } = await import('node:path');
	const root = resolve(__dirname, '../../../..');
	const file = JSON.parse(readFileSync(resolve(root, 'examples/n8n/node/notify-on-bounce.json'), 'utf8')) as {
		nodes: Array<{ name: string; type: string; parameters: Record<string, unknown>; credentials?: Record<string, { id: string; name: string }> }>;
		connections: Record<string, { main: Array<Array<{ node: string }>> }>;
	};
	const guide = readFileSync(resolve(root, 'docs/n8n.md'), 'utf8');
	const section = guide.slice(guide.indexOf('## Notify on bounce'));
	const block = /```json\n([\s\S]*?)\n```/.exec(section);
	assert.ok(block, 'docs/n8n.md has a json block under "Notify on bounce"');
	assert.deepEqual(JSON.parse(block[1]), file, 'the guide shows the example file as it is');

	const trigger = file.nodes.find((n) => n.type === 'n8n-nodes-gmailrelay.gmailRelayTrigger');
	assert.ok(trigger);
	const known = new Set(['pollTimes', ...new GmailRelayTrigger().description.properties.map((p) => p.name)]);
	assert.deepEqual(Object.keys(trigger.parameters).filter((k) => !known.has(k)), [], 'only parameters the node has');
	assert.equal(trigger.parameters.includeBounced, true);
	assert.deepEqual(trigger.credentials?.gmailRelayApi, { id: 'gmrCredNodeApi01', name: 'gmailrelay API' }, 'the shipped credential template');
	const names = new Set(file.nodes.map((n) => n.name));
	for (const [from, c] of Object.entries(file.connections)) {
		assert.ok(names.has(from), from);
		for (const out of c.main) {
			for (const to of out) {
				assert.ok(names.has(to.node), `${from} → ${to.node}`);
			}
		}
	}
	assert.match(JSON.stringify(file.nodes.find((n) => n.name === 'Bounced?')?.parameters), /"leftValue":"=\{\{ \$json\.reason \}\}","rightValue":"bounced"/);
	assert.deepEqual(file.connections['Bounced?'].main.map((o) => o.map((t) => t.node)), [['Format notice'], ['Review or queued']]);
});
