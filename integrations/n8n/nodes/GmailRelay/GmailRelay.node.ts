import type {
	IDataObject,
	IExecuteFunctions,
	IHttpRequestOptions,
	INode,
	INodeExecutionData,
	INodeType,
	INodeTypeDescription,
	JsonObject,
} from 'n8n-workflow';
// n8n-workflow is a peer dependency: inside n8n it resolves to n8n's own
// copy (n8n puts its node_modules on NODE_PATH before loading packages).
import { NodeApiError, NodeOperationError } from 'n8n-workflow';

import {
	OUTPUTS,
	buildBody,
	keyWarnings,
	refusal,
	send,
	trimBase,
	type FullResponse,
	type KeySpec,
	type RequestOptions,
	type SendResult,
} from './logic';

/** Index of the Needs Fix output. */
const NEEDS_FIX = OUTPUTS.indexOf('needsFix');

/**
 * Send Email (safe retry): posts to gmailrelay's /v1/send with an
 * idempotency key and routes the relay's answer to an output: Sent,
 * Pending (the relay owns it), Retry Later, Needs Fix (a person must
 * decide: a job in review, or one an operator abandoned). A refusal (400,
 * 401, 403, 413, 422, 502 provider_rejected, 500…) and a parameter that
 * cannot be sent are errors: NodeApiError / NodeOperationError, so n8n's
 * Error Workflow fires, or, with On Error set to continue, an item
 * {error} (on Needs Fix, never on Sent).
 */
export class GmailRelay implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Send Email (safe retry)',
		name: 'gmailRelay',
		icon: 'file:gmailrelay.svg',
		group: ['output'],
		version: 1,
		subtitle: '={{"key: " + ($parameter["keySource"] === "fields" ? "customer:event:order" : "expression")}}',
		description: 'Send an e-mail through gmailrelay: a retry with the same key is never a second e-mail',
		defaults: { name: 'Send Email (safe retry)' },
		inputs: ['main'],
		// Four outputs by design (the relay's answers routed; refusals are errors);
		// the rule allows more than one only to nodes named if or switch.
		// eslint-disable-next-line n8n-nodes-base/node-class-description-outputs-wrong
		outputs: ['main', 'main', 'main', 'main'],
		outputNames: ['Sent', 'Pending (relay owns it)', 'Retry Later', 'Needs Fix'],
		credentials: [{ name: 'gmailRelayApi', required: true }],
		// An AI agent may send through it: a retried tool call is a replay.
		usableAsTool: true,
		properties: [
			{
				displayName:
					'The key must come from the event (order, webhook payload), never from $now, $execution.ID or a random function: the key is what makes a retry a retry. Leave Retry On Fail off; this node retries by itself.',
				name: 'keyNotice',
				type: 'notice',
				default: '',
			},
			{
				displayName: 'Key From',
				name: 'keySource',
				type: 'options',
				options: [
					{ name: 'Customer ID, Event Type, Order ID', value: 'fields' },
					{ name: 'Expression', value: 'key' },
				],
				default: 'fields',
			},
			{
				displayName: 'Customer ID',
				name: 'customerId',
				type: 'string',
				default: '',
				required: true,
				displayOptions: { show: { keySource: ['fields'] } },
			},
			{
				displayName: 'Event Type',
				name: 'eventType',
				type: 'string',
				default: '',
				placeholder: 'order.shipped',
				required: true,
				displayOptions: { show: { keySource: ['fields'] } },
			},
			{
				displayName: 'Order ID',
				name: 'orderId',
				type: 'string',
				default: '',
				required: true,
				displayOptions: { show: { keySource: ['fields'] } },
			},
			{
				displayName: 'Idempotency Key',
				name: 'key',
				type: 'string',
				default: '',
				required: true,
				description: 'Any string that is the same on every run of the same job',
				displayOptions: { show: { keySource: ['key'] } },
			},
			{ displayName: 'To', name: 'to', type: 'string', default: '', required: true, placeholder: 'name@example.com' },
			{
				displayName: 'Subject',
				name: 'subject',
				type: 'string',
				default: '',
				description: 'May be empty: Gmail sends a message without a subject, and so does the relay',
			},
			{ displayName: 'Text', name: 'text', type: 'string', typeOptions: { rows: 4 }, default: '' },
			{
				displayName: 'Additional Fields',
				name: 'additionalFields',
				type: 'collection',
				placeholder: 'Add Field',
				default: {},
				options: [
					{ displayName: 'BCC', name: 'bcc', type: 'string', default: '' },
					{ displayName: 'CC', name: 'cc', type: 'string', default: '' },
					{ displayName: 'Channel', name: 'channel', type: 'string', default: '', description: 'Policy channel (default: default)' },
					{ displayName: 'From', name: 'from', type: 'string', default: '' },
					{ displayName: 'HTML', name: 'html', type: 'string', typeOptions: { rows: 4 }, default: '' },
					{ displayName: 'Reply To', name: 'replyTo', type: 'string', default: '' },
					{ displayName: 'Thread ID', name: 'threadId', type: 'string', default: '' },
				],
			},
			{
				displayName: 'Options',
				name: 'options',
				type: 'collection',
				placeholder: 'Add Option',
				default: {},
				options: [
					{ displayName: 'Max Waits', name: 'maxWaits', type: 'number', default: 5, description: 'How often to wait Retry-After on 409/429/503 before the item goes to Retry Later' },
					{ displayName: 'Max Wait (Seconds)', name: 'maxWaitSeconds', type: 'number', default: 30, description: 'Longest single wait' },
					{ displayName: 'Repeats With No Answer', name: 'maxNoAnswer', type: 'number', default: 3, description: 'How often a request with no answer (dropped response, reset) is repeated; the relay answers the repeat 202 or 200, never a second e-mail' },
					{ displayName: 'Timeout (Ms)', name: 'timeout', type: 'number', default: 90000 },
				],
			},
		],
	};

	async execute(this: IExecuteFunctions): Promise<INodeExecutionData[][]> {
		const items = this.getInputData();
		// Credentials once, before any item is sent: if they cannot be read,
		// the node fails with nothing sent (no item is labelled Sent).
		const creds = await this.getCredentials('gmailRelayApi');
		const base = trimBase(String(creds.url));
		const out: INodeExecutionData[][] = OUTPUTS.map(() => []);
		const p = this.getNode().parameters;
		const warnings = keyWarnings(
			p.keySource === 'key' ? { key: p.key } : { customerId: p.customerId, eventType: p.eventType, orderId: p.orderId },
		);
		if (warnings.length > 0 && typeof this.addExecutionHints === 'function') {
			this.addExecutionHints(...warnings.map((message) => ({ message, type: 'warning' as const, location: 'outputPane' as const })));
		}
		const req = async (o: RequestOptions) =>
			(await this.helpers.httpRequestWithAuthentication.call(this, 'gmailRelayApi', o as IHttpRequestOptions)) as FullResponse;
		const sleep = async (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
		const limitsOf = (opts: IDataObject) => ({
			maxWaits: Number(opts.maxWaits ?? 5),
			maxWaitSeconds: Number(opts.maxWaitSeconds ?? 30),
			maxNoAnswer: Number(opts.maxNoAnswer ?? 3),
			timeoutMs: Number(opts.timeout ?? 90000),
		});
		for (let i = 0; i < items.length; i++) {
			// Everything of one item is inside its own try, so an error is the
			// item's: with On Error set to continue, item k becomes an error
			// item and the next item is still sent. Were the error to escape
			// execute(), n8n would put every input item on output 0 (Sent),
			// unsent ones included. Without continue, the first error fails
			// the node (Error Workflow); the items before it were sent, and
			// running the execution again replays them (same keys).
			try {
				const keySource = this.getNodeParameter('keySource', i) as string;
				// Parameter values as evaluated, never through String(): a
				// missing field is undefined, and "undefined" is no key part.
				const k: KeySpec =
					keySource === 'key'
						? { key: this.getNodeParameter('key', i) }
						: {
								customerId: this.getNodeParameter('customerId', i),
								eventType: this.getNodeParameter('eventType', i),
								orderId: this.getNodeParameter('orderId', i),
							};
				const extra = (this.getNodeParameter('additionalFields', i, {}) ?? {}) as IDataObject;
				const opts = (this.getNodeParameter('options', i, {}) ?? {}) as IDataObject;
				let body: Record<string, unknown>;
				try {
					body = buildBody(k, {
						to: this.getNodeParameter('to', i),
						subject: this.getNodeParameter('subject', i, ''),
						text: this.getNodeParameter('text', i, ''),
						...extra,
					});
				} catch (err) {
					// A blank key part or recipient: a workflow to fix, found
					// before any request (the relay would answer 400 too).
					throw new NodeOperationError(this.getNode(), err as Error, { itemIndex: i });
				}
				const r = await send(req, sleep, base, body, limitsOf(opts));
				if (r.outcome === 'failed') {
					throw refused(this.getNode(), r, i);
				}
				const json: IDataObject = { ...(r as unknown as IDataObject) };
				if (warnings.length > 0) {
					json.key_warnings = warnings;
				}
				out[OUTPUTS.indexOf(r.outcome)].push({ json, pairedItem: { item: i } });
			} catch (err) {
				const e = asNodeError(this.getNode(), err, i);
				if (!this.continueOnFail()) {
					throw e;
				}
				// n8n's shape for an error item: {json: {error}} plus the error
				// itself. With "Continue (using error output)" n8n moves it to
				// its Error output; with "Continue" it stays on Needs Fix, not
				// on Sent, where it would look like a sent e-mail.
				out[NEEDS_FIX].push({ json: { error: e.message }, error: e, pairedItem: { item: i } });
			}
		}
		return out;
	}
}

/** refused is the NodeApiError for a failed send result (a refusal of the relay). */
function refused(node: INode, r: SendResult, itemIndex: number): NodeApiError {
	const { message, description } = refusal(r);
	const response: JsonObject =
		r.body !== null && typeof r.body === 'object' ? (r.body as JsonObject) : { body: String(r.body ?? '') };
	return new NodeApiError(node, response, { message, description, httpCode: String(r.status), itemIndex });
}

/**
 * asNodeError returns err as an n8n error of item itemIndex: a NodeApiError
 * or NodeOperationError as it is; anything else (an expression n8n could
 * not evaluate, an unexpected exception) wrapped in a NodeOperationError,
 * which keeps its message and description.
 */
function asNodeError(node: INode, err: unknown, itemIndex: number): NodeApiError | NodeOperationError {
	if (err instanceof NodeApiError || err instanceof NodeOperationError) {
		return err;
	}
	return new NodeOperationError(node, err instanceof Error ? err : String(err), { itemIndex });
}
