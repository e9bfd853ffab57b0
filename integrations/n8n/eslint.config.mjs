// n8n's community-node lint rules: @n8n/eslint-plugin-community-nodes (the
// set n8n's own node CLI lints with), and eslint-plugin-n8n-nodes-base's
// community (package.json), credentials and nodes sets (n8n-nodes-starter's).
//
// recommendedWithoutN8nCloudSupport: the nodes are for self-hosted n8n next
// to a relay; the Send node waits Retry-After with setTimeout, which n8n
// Cloud's verification forbids (no-restricted-globals), and the unit tests
// import node:test (no-restricted-imports).
import tsParser from '@typescript-eslint/parser';
import jsonParser from 'jsonc-eslint-parser';
import communityNodes from '@n8n/eslint-plugin-community-nodes';
import nodesBase from 'eslint-plugin-n8n-nodes-base';

const community = communityNodes.configs.recommendedWithoutN8nCloudSupport;
const base = { 'n8n-nodes-base': nodesBase };

export default [
	{ ignores: ['dist/**', 'node_modules/**', 'package-lock.json', 'eslint.config.mjs', 'scripts/**', 'index.js', 'e2e/**'] },
	{
		files: ['package.json'],
		languageOptions: { parser: jsonParser },
		plugins: { ...base, ...community.plugins },
		rules: {
			...nodesBase.configs.community.rules,
			'@n8n/community-nodes/package-name-convention': 'error',
			'@n8n/community-nodes/ai-node-package-json': 'error',
		},
	},
	{
		files: ['credentials/**/*.ts', 'nodes/**/*.ts', 'test/**/*.ts'],
		languageOptions: { parser: tsParser, parserOptions: { ecmaVersion: 'latest', sourceType: 'module' } },
		plugins: community.plugins,
		rules: community.rules,
	},
	{
		files: ['credentials/**/*.ts'],
		plugins: base,
		rules: {
			...nodesBase.configs.credentials.rules,
			// "Only applicable to nodes in the main repository" (the rule's own
			// doc): a community credential links a full URL, which
			// @n8n/community-nodes/credential-documentation-url checks.
			'n8n-nodes-base/cred-class-field-documentation-url-miscased': 'off',
		},
	},
	{
		files: ['nodes/**/*.ts'],
		plugins: base,
		rules: nodesBase.configs.nodes.rules,
	},
];
