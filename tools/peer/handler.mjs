// The peer of oncely's notify function, written with Powertools for AWS
// Lambda (TypeScript): its batch utility reports partial batch failures, its
// idempotency utility keeps one record per event in DynamoDB, and each
// record's work is oncely's notify: POST the event to DOWNSTREAM_URL with an
// Idempotency-Key, 2xx is success (a short summary is stored), anything
// else fails the record. The key is the event's id and action (oncely's
// evt:<id>:<action>), and the whole body is the payload that is validated
// (oncely's fingerprint).
import http from 'node:http';
import {
  BatchProcessor, EventType, processPartialResponse,
} from '@aws-lambda-powertools/batch';
import { IdempotencyConfig, makeIdempotent } from '@aws-lambda-powertools/idempotency';
import { DynamoDBPersistenceLayer } from '@aws-lambda-powertools/idempotency/dynamodb';

const downstream = new URL(process.env.DOWNSTREAM_URL);
const agent = new http.Agent({ keepAlive: true, maxSockets: 100 });

const persistenceStore = new DynamoDBPersistenceLayer({ tableName: process.env.IDEMPOTENCY_TABLE });
const config = new IdempotencyConfig({
  eventKeyJmesPath: 'powertools_json(body).[id, action]',
  payloadValidationJmesPath: 'powertools_json(body)',
  throwOnNoIdempotencyKey: true,
  expiresAfterSeconds: 18 * 24 * 3600,
});
const processor = new BatchProcessor(EventType.SQS);

function post(body, key) {
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: downstream.hostname, port: downstream.port, path: downstream.pathname, method: 'POST', agent,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body), 'Idempotency-Key': key },
      timeout: 5000,
    }, (res) => {
      const chunks = [];
      let size = 0;
      res.on('data', (c) => { if (size < 256) chunks.push(c); size += c.length; });
      res.on('end', () => resolve({ status: res.statusCode, head: Buffer.concat(chunks).subarray(0, 256).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end(body);
  });
}

const notify = async (record) => {
  const event = JSON.parse(record.body);
  const key = `evt:${event.id}:${event.action}`;
  const res = await post(record.body, key);
  if (res.status < 200 || res.status >= 300) {
    throw new Error(`notify: downstream replied ${res.status}`);
  }
  return { delivered: true, downstream_status: res.status, reply: res.head };
};

const notifyOnce = makeIdempotent(notify, { persistenceStore, config });

export const handler = async (event, context) => {
  config.registerLambdaContext(context);
  return processPartialResponse(event, notifyOnce, processor, { context });
};
