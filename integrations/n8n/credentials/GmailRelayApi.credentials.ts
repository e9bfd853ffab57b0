import type { IAuthenticateGeneric, ICredentialTestRequest, ICredentialType, Icon, INodeProperties } from 'n8n-workflow';

/** The gmailrelay credential: the relay's URL and its API token. */
export class GmailRelayApi implements ICredentialType {
	name = 'gmailRelayApi';

	displayName = 'Gmailrelay API';

	icon: Icon = 'file:gmailrelay.svg';

	documentationUrl = 'https://github.com/gmailrelay/gmailrelay/blob/main/docs/n8n.md';

	properties: INodeProperties[] = [
		{
			displayName: 'Relay URL',
			name: 'url',
			type: 'string',
			default: 'http://127.0.0.1:8080',
			placeholder: 'http://gmailrelay:8080',
			description: 'Base URL of the relay, without a trailing slash',
			required: true,
		},
		{
			displayName: 'API Token',
			name: 'apiToken',
			type: 'string',
			typeOptions: { password: true },
			default: '',
			description: 'The relay\'s API token (--api-token), not the admin token',
			required: true,
		},
	];

	authenticate: IAuthenticateGeneric = {
		type: 'generic',
		properties: {
			headers: {
				Authorization: '=Bearer {{$credentials.apiToken}}',
			},
		},
	};

	// The test must need the API token: /readyz answers anyone, so a wrong
	// token tested OK. GET /v1/jobs is an API-token read (401 without it or
	// with a wrong one); limit=1 keeps it to one row.
	test: ICredentialTestRequest = {
		request: {
			baseURL: '={{$credentials.url.replace(/\\/+$/, "")}}',
			url: '/v1/jobs?limit=1',
		},
	};
}
