// Copies what tsc does not next to the compiled nodes and credentials: the
// SVG icons and each node's codex file (<Node>.node.json, which n8n reads
// beside <Node>.node.js).
import { cpSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

const asset = (f) => f.endsWith('.svg') || f.endsWith('.node.json');
for (const dir of readdirSync('nodes')) {
	for (const f of readdirSync(join('nodes', dir))) {
		if (asset(f)) {
			cpSync(join('nodes', dir, f), join('dist/nodes', dir, f));
		}
	}
}
for (const f of readdirSync('credentials')) {
	if (asset(f)) {
		cpSync(join('credentials', f), join('dist/credentials', f));
	}
}
