import type {
	IDataObject,
	IHttpRequestOptions,
	INodeExecutionData,
	INodeType,
	INodeTypeDescription,
	IPollFunctions,
	JsonObject,
} from 'n8n-workflow';
import { NodeApiError } from 'n8n-workflow';

import { trimBase, type FullResponse, type RequestOptions } from '../GmailRelay/logic';
import { poll, RelayHttpError, type PollResult, type Seen, type SeenBounced } from './poll';

/**
 * Pages of 100 jobs the Trigger reads per state and poll. `next` is followed
 * until the relay says done; this cap only guards against a listing that
 * never ends, and is logged when reached (pages are in Message-ID order, so
 * a cap that is hit can hide new jobs).
 */
export const MAX_PAGES = 1000;

/**
 * gmailrelay Trigger: polls the relay's acceptance log and emits every job
 * that entered `review` (a human must decide), and optionally jobs waiting
 * in `queued` longer than a threshold (once the relay has an outbox) and
 * jobs a delivery report said some recipient of bounced.
 */
// A trigger starts a workflow; it is no tool an AI agent could call.
// eslint-disable-next-line @n8n/community-nodes/node-usable-as-tool
export class GmailRelayTrigger implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'gmailrelay Trigger',
		name: 'gmailRelayTrigger',
		icon: 'file:gmailrelay.svg',
		group: ['trigger'],
		version: 1,
		description: 'Starts the workflow when a gmailrelay job needs a human (review), waits too long in the queue, or bounced',
		defaults: { name: 'gmailrelay Trigger' },
		polling: true,
		inputs: [],
		outputs: ['main'],
		credentials: [{ name: 'gmailRelayApi', required: true }],
		properties: [
			{
				displayName: 'Include Queued Jobs',
				name: 'includeQueued',
				type: 'boolean',
				default: false,
				description: 'Whether to also emit jobs waiting in the queued state (relays with an outbox) longer than the threshold; skipped when the relay has no such state',
			},
			{
				displayName: 'Queued Longer Than (Minutes)',
				name: 'queuedMinutes',
				type: 'number',
				default: 15,
				displayOptions: { show: { includeQueued: [true] } },
			},
			{
				displayName: 'Include Bounced Jobs',
				name: 'includeBounced',
				type: 'boolean',
				default: false,
				description:
					'Whether to also emit sent jobs a delivery report said some recipient of failed (reason "bounced", with the bounced addresses), once per bounce and again when more recipients bounce; skipped when the relay cannot list bounced jobs',
			},
		],
	};

	async poll(this: IPollFunctions): Promise<INodeExecutionData[][] | null> {
		const creds = await this.getCredentials('gmailRelayApi');
		const base = trimBase(String(creds.url));
		const data = this.getWorkflowStaticData('node') as IDataObject & { seen?: Seen; seenBounced?: SeenBounced };
		const req = async (o: RequestOptions) =>
			(await this.helpers.httpRequestWithAuthentication.call(this, 'gmailRelayApi', o as IHttpRequestOptions)) as FullResponse;
		let r: PollResult;
		try {
			r = await poll(
				req,
				base,
				{
					includeQueued: this.getNodeParameter('includeQueued', false) as boolean,
					queuedOlderThanMs: Number(this.getNodeParameter('queuedMinutes', 15)) * 60_000,
					includeBounced: this.getNodeParameter('includeBounced', false) as boolean,
					maxPages: MAX_PAGES,
				},
				data.seen ?? {},
				new Date(),
				this.getMode() === 'manual',
				data.seenBounced ?? {},
			);
		} catch (err) {
			// A relay that answers with an error (401: a wrong token) is an
			// API error with its status, as n8n shows them.
			if (err instanceof RelayHttpError) {
				const body = err.body !== null && typeof err.body === 'object' ? (err.body as JsonObject) : { body: String(err.body ?? '') };
				throw new NodeApiError(this.getNode(), body, { message: err.message, httpCode: String(err.status) });
			}
			throw err;
		}
		data.seen = r.seen;
		data.seenBounced = r.seenBounced;
		if (r.bouncedUnavailable) {
			this.logger.warn('gmailrelay Trigger: the relay cannot list bounced jobs (GET /v1/jobs?delivery=bounced); Include Bounced Jobs needs a newer relay.');
		}
		if (r.truncated) {
			this.logger.warn(
				`gmailrelay Trigger: stopped after ${MAX_PAGES} pages of ${r.truncated.join(' and ')} jobs (${MAX_PAGES * 100} jobs); jobs past that were not read this poll. Resolve or abandon old jobs.`,
			);
		}
		if (r.jobs.length === 0) {
			return null;
		}
		return [this.helpers.returnJsonArray(r.jobs as unknown as IDataObject[])];
	}
}
