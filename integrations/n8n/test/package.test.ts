import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { test } from 'node:test';

import type { INodeType } from 'n8n-workflow';

// What `npm pack` puts in the tarball, as n8n's community-node conventions
// (n8n-nodes-starter) want it: the keyword n8n's Community Nodes search
// finds, an `n8n` block naming the built nodes and credentials, a codex
// file (<Node>.node.json) and the icon beside each node, and a README. Runs
// after `npm run build`: the tarball holds dist/, not the TypeScript.

const root = resolve(__dirname, '../..');

interface Packed {
	filename: string;
	name: string;
	version: string;
	files: Array<{ path: string }>;
}

function pack(): Packed {
	const out = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
	return (JSON.parse(out) as Packed[])[0];
}

const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
	name: string;
	version: string;
	keywords: string[];
	n8n: { n8nNodesApiVersion: number; nodes: string[]; credentials: string[] };
	peerDependencies?: Record<string, string>;
	peerDependenciesMeta?: Record<string, { optional?: boolean }>;
	dependencies?: Record<string, string>;
};

test('npm pack: n8n-nodes-gmailrelay-VERSION.tgz with the n8n keyword, the n8n block, codex, icons and README', () => {
	const p = pack();
	assert.equal(p.filename, `n8n-nodes-gmailrelay-${pkg.version}.tgz`);
	assert.ok(pkg.keywords.includes('n8n-community-node-package'), 'n8n finds community packages by this keyword');
	assert.equal(pkg.n8n.n8nNodesApiVersion, 1);
	assert.deepEqual(pkg.n8n.nodes, ['dist/nodes/GmailRelay/GmailRelay.node.js', 'dist/nodes/GmailRelayTrigger/GmailRelayTrigger.node.js']);
	assert.deepEqual(pkg.n8n.credentials, ['dist/credentials/GmailRelayApi.credentials.js']);
	const files = new Set(p.files.map((f) => f.path));
	for (const f of ['package.json', 'README.md', ...pkg.n8n.nodes, ...pkg.n8n.credentials]) {
		assert.ok(files.has(f), `${f} is in the tarball`);
	}
	for (const nodePath of pkg.n8n.nodes) {
		// n8n reads the codex at the node's path + "on" (X.node.js → X.node.json).
		assert.ok(files.has(`${nodePath}on`), `${nodePath}on (codex) is in the tarball`);
		// n8n takes the class named as the file (GmailRelay.node.js → GmailRelay).
		const mod = require(join(root, nodePath)) as Record<string, new () => INodeType>;
		const description = new mod[basename(nodePath, '.node.js')]().description;
		const icon = String(description.icon).replace(/^file:/, '');
		assert.ok(files.has(join(dirname(nodePath), icon)), `${description.name}'s icon ${icon} is beside it`);
		const codex = JSON.parse(readFileSync(join(root, `${nodePath}on`), 'utf8')) as Record<string, unknown> & {
			categories: string[];
			resources: { primaryDocumentation: Array<{ url: string }>; credentialDocumentation: Array<{ url: string }> };
		};
		assert.equal(codex.node, `${pkg.name}.${description.name}`, 'codex node is <package>.<node name>');
		assert.equal(codex.nodeVersion, '1.0');
		assert.equal(codex.codexVersion, '1.0');
		assert.ok(codex.categories.length > 0);
		for (const r of [...codex.resources.primaryDocumentation, ...codex.resources.credentialDocumentation]) {
			assert.match(r.url, /^https:\/\/github\.com\/gmailrelay\/gmailrelay\/blob\/main\/docs\/n8n\.md/);
		}
	}
	const cred = pkg.n8n.credentials[0];
	assert.ok(files.has(join(dirname(cred), 'gmailrelay.svg')), "the credential's icon");
	const stray = [...files].filter((f) => f.startsWith('dist/test/') || f.endsWith('.ts') || f.startsWith('node_modules/') || f.startsWith('e2e/'));
	assert.deepEqual(stray, [], 'no tests, sources or e2e fixtures in the tarball');
	for (const f of files) {
		assert.ok(existsSync(join(root, f)), f);
	}
});

test('package: no runtime dependencies; n8n-workflow is an optional peer (n8n provides its own)', () => {
	// `npm install <tarball>` in ~/.n8n/nodes would otherwise fetch a second
	// n8n-workflow (the newest, whatever the n8n) next to n8n's own; n8n's
	// Community Nodes screen drops peer dependencies before installing.
	assert.equal(pkg.dependencies, undefined);
	assert.deepEqual(pkg.peerDependencies, { 'n8n-workflow': '*' });
	assert.equal(pkg.peerDependenciesMeta?.['n8n-workflow']?.optional, true);
});
