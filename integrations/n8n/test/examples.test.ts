import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { test } from 'node:test';

// Runs the JavaScript of every Code node in examples/n8n (and its Manual
// Trigger variants) the way n8n's Code node does in "Run Once for All Items"
// mode: the code is a function body with $input, $ and $env in scope. n8n
// found a ReferenceError in one of them (an undefined `key`) that no
// structural check saw; this catches that class of mistake without n8n.

const examples = resolve(__dirname, '../../../../examples/n8n');

interface Item {
	json: Record<string, unknown>;
}
interface CodeNode {
	file: string;
	name: string;
	code: string;
}

function codeNodes(): CodeNode[] {
	const out: CodeNode[] = [];
	for (const dir of [examples, join(examples, 'manual')]) {
		for (const f of readdirSync(dir).filter((n) => n.endsWith('.json'))) {
			const wf = JSON.parse(readFileSync(join(dir, f), 'utf8')) as {
				nodes?: Array<{ name: string; type: string; parameters: { jsCode?: string } }>;
			};
			for (const n of wf.nodes ?? []) {
				if (n.type === 'n8n-nodes-base.code') {
					out.push({ file: join(dir, f), name: n.name, code: String(n.parameters.jsCode) });
				}
			}
		}
	}
	return out;
}

/** run executes one Code node's body with the given input items and named node outputs. */
function run(code: string, input: Item[], nodes: Record<string, Item[]>, env: Record<string, string>): Item[] {
	const $input = { all: () => input, first: () => input[0] };
	const $ = (name: string) => {
		if (!(name in nodes)) {
			throw new Error(`the code reads node "${name}", which the test does not provide`);
		}
		return { all: () => nodes[name], first: () => nodes[name][0] };
	};
	const fn = new Function('$input', '$', '$env', 'Buffer', code) as (...a: unknown[]) => Item[];
	return fn($input, $, env, Buffer);
}

const msgid = '<job-b1b7b1d9b22c90a9ff2752a774920ae1@e2e.gmailrelay.test>';
const order = {
	customer_id: 'cus_123',
	event_type: 'order.shipped',
	order_id: 'ord_457',
	occurred_at: '2026-05-04T10:00:00Z',
	from: 'shop@example.com',
	to: 'customer@example.org',
	subject: 'Your order ord_457 has shipped',
	body: 'Hello,\n\nyour order ord_457 is on its way.',
};
const reviewJob = {
	message_id: '<job-r@x>',
	key: 'k1',
	channel: 'billing',
	attempts: 1,
	updated_at: '2026-12-03T12:00:00Z',
	to: ['ann@example.org'],
	subject: 'Your invoice INV-1',
};

/** What each Code node gets, and what its output must show. */
const cases: Record<string, { input: Item[]; nodes: Record<string, Item[]>; check: (out: Item[]) => void }> = {
	'Build raw MIME': {
		input: [{ json: { message_id: msgid, key: 'cus_123:order.shipped:ord_457', domain: 'e2e.gmailrelay.test' } }],
		nodes: { 'Sample order': [{ json: order }] },
		check: (out) => {
			assert.equal(out.length, 1);
			assert.equal(out[0].json.key, 'cus_123:order.shipped:ord_457');
			assert.equal(out[0].json.message_id, msgid);
			const raw = Buffer.from(String(out[0].json.raw), 'base64url').toString('utf8');
			assert.match(raw, new RegExp(`^From: shop@example.com\r\nTo: customer@example.org\r\nSubject: Your order ord_457 has shipped\r\nMessage-ID: ${msgid}\r\nDate: Mon, 04 May 2026 10:00:00 GMT\r\n`));
			assert.doesNotMatch(raw, /undefined/);
		},
	},
	'Format alert': {
		input: [{ json: { jobs: [reviewJob] } }],
		nodes: {},
		check: (out) => {
			assert.equal(out[0].json.count, 1);
			// The operator decides in the console; the alert names the mail.
			assert.match(String(out[0].json.text), /decide: +http:\/\/relay:8080\/ui\/jobs\/%3Cjob-r%40x%3E\n/);
			assert.match(String(out[0].json.text), /Your invoice INV-1 +to: ann@example\.org/);
			assert.doesNotMatch(String(out[0].json.text), /POST|\/resolve/);
			assert.doesNotMatch(String(out[0].json.text), /undefined/);
		},
	},
	'Sample webhook call': {
		input: [{ json: {} }],
		nodes: {},
		check: (out) => {
			const body = out[0].json.body as Record<string, string>;
			assert.deepEqual([body.customer_id, body.event_type, body.order_id], ['cus_123', 'order.shipped', 'ord_456']);
		},
	},
};

test('examples: every Code node runs and gives what the next node reads', () => {
	const nodes = codeNodes();
	assert.ok(nodes.length >= 5, `found ${nodes.length} Code nodes`);
	for (const n of nodes) {
		const c = cases[n.name];
		assert.ok(c, `${n.file}: Code node "${n.name}" has no case in test/examples.test.ts`);
		c.check(run(n.code, c.input, c.nodes, { GMAILRELAY_URL: 'http://relay:8080' }));
	}
});

test('examples: the raw recipe strips CR/LF from header values', () => {
	const n = codeNodes().find((x) => x.name === 'Build raw MIME');
	assert.ok(n);
	const c = cases['Build raw MIME'];
	const evil = { ...order, subject: 'Hi\r\nBcc: victim@example.com' };
	const out = run(n.code, c.input, { 'Sample order': [{ json: evil }] }, {});
	const raw = Buffer.from(String(out[0].json.raw), 'base64url').toString('utf8');
	assert.match(raw, /\r\nSubject: Hi Bcc: victim@example.com\r\n/);
	assert.doesNotMatch(raw, /\r\nBcc:/);
});
