// A minimal Lambda Runtime API client for Node: what the managed Node.js
// runtime does for an async handler (init, then next -> handler ->
// response or error, forever), over one keep-alive connection to the
// Runtime API. AWS's own client (npm aws-lambda-ric) needs Node 22 and a
// native build of curl and aws-lambda-cpp, which did not finish here; this
// loop is the documented Runtime API and nothing more, so the peer's CPU is
// the handler's, Powertools' and the AWS SDK's, not a runtime's.
import http from 'node:http';

const [host, port] = process.env.AWS_LAMBDA_RUNTIME_API.split(':');
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
const base = '/2018-06-01/runtime';

function call(method, path, body) {
  return new Promise((resolve, reject) => {
    const headers = body === undefined ? {} : { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) };
    const req = http.request({ host, port, method, path: base + path, agent, headers }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

function errorBody(err) {
  return JSON.stringify({ errorType: err?.name ?? 'Error', errorMessage: String(err?.message ?? err) });
}

let handler;
try {
  ({ handler } = await import(process.env.PEER_HANDLER ?? './handler.mjs'));
} catch (err) {
  await call('POST', '/init/error', errorBody(err));
  process.exit(1);
}

for (;;) {
  const next = await call('GET', '/invocation/next');
  const id = next.headers['lambda-runtime-aws-request-id'];
  const deadline = Number(next.headers['lambda-runtime-deadline-ms']);
  const context = {
    awsRequestId: id,
    functionName: process.env.AWS_LAMBDA_FUNCTION_NAME,
    functionVersion: '$LATEST',
    invokedFunctionArn: next.headers['lambda-runtime-invoked-function-arn'],
    memoryLimitInMB: process.env.AWS_LAMBDA_FUNCTION_MEMORY_SIZE ?? '256',
    logGroupName: '', logStreamName: '',
    callbackWaitsForEmptyEventLoop: true,
    getRemainingTimeInMillis: () => deadline - Date.now(),
  };
  try {
    const result = await handler(JSON.parse(next.body), context);
    await call('POST', `/invocation/${id}/response`, JSON.stringify(result ?? null));
  } catch (err) {
    await call('POST', `/invocation/${id}/error`, errorBody(err));
  }
}
