// Copies the nodes' SVG icons next to the compiled nodes (tsc copies only .ts).
import { cpSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

for (const dir of readdirSync('src/nodes')) {
	for (const f of readdirSync(join('src/nodes', dir))) {
		if (f.endsWith('.svg')) {
			cpSync(join('src/nodes', dir, f), join('dist/nodes', dir, f));
		}
	}
}
