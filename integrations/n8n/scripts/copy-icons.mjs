// Copies the SVG icons next to the compiled nodes and credentials (tsc copies only .ts).
import { cpSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

for (const dir of readdirSync('nodes')) {
	for (const f of readdirSync(join('nodes', dir))) {
		if (f.endsWith('.svg')) {
			cpSync(join('nodes', dir, f), join('dist/nodes', dir, f));
		}
	}
}
for (const f of readdirSync('credentials')) {
	if (f.endsWith('.svg')) {
		cpSync(join('credentials', f), join('dist/credentials', f));
	}
}
