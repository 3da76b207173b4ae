// Trace context through jobs (OpenTelemetry), as leaseq.client does in Python
// (docs/node.md, "Tracing").  When @opentelemetry/api can be imported (an
// optional peer dependency), a push carries the current context in its META,
// written by the registered propagator (W3C traceparent and tracestate with
// the SDK's defaults), and a Worker runs each job in a CONSUMER span
// "<queue> process" linked to the producer's context read back from META (or
// its child, with traceParent "child").  Without it the import fails once, when
// this module loads, and both do nothing.

const api = await import("@opentelemetry/api").catch(() => null);

export const enabled = api !== null;
export const TRACE_PARENTS = ["link", "child"];
export const TRACER_NAME = "leaseq";

export function withTraceContext(meta) {
  if (!api) return meta;
  const carrier = {};
  api.propagation.inject(api.context.active(), carrier);
  if (!Object.keys(carrier).length) return meta;
  if (meta === undefined || meta === null) return carrier;
  const isMap = meta instanceof Map;
  if (!isMap && (typeof meta !== "object" || Array.isArray(meta) || ArrayBuffer.isView(meta))) return meta;  // refused by metaArgs
  const entries = isMap ? [...meta] : Object.entries(meta);
  const given = new Set(entries.map(([name]) => (ArrayBuffer.isView(name) ? Buffer.from(name).toString() : String(name))));
  return new Map([...entries, ...Object.entries(carrier).filter(([name]) => !given.has(name))]);
}

/** The spans one worker runs its jobs in. */
export class JobSpans {
  constructor(queue, consumer, client, describe, { traceParent = "link", tracerProvider } = {}) {
    if (!TRACE_PARENTS.includes(traceParent)) {
      throw new RangeError(`traceParent must be "link" or "child", not ${JSON.stringify(traceParent)}`);
    }
    this.child = traceParent === "child";
    this.describe = describe;
    this.name = `${queue} process`;
    this.attributes = {
      "messaging.system": "leaseq",
      "messaging.destination.name": queue,
      "messaging.operation.type": "process",
      "messaging.operation.name": "process",
      "messaging.operation": "process",          // the conventions' name before 1.26
      "messaging.client.id": consumer,
      ...serverAttributes(client),
    };
    this.tracer = api ? (tracerProvider ?? api.trace.getTracerProvider()).getTracer(TRACER_NAME) : null;
  }

  /** `fn(span)` run inside the job's span, current while it runs (so the handler's own spans are its
   * children); the span ends when `fn` settles. */
  async process(job, fn) {
    if (!this.tracer) return fn(NO_SPAN);
    const extracted = job.meta ? api.propagation.extract(api.ROOT_CONTEXT, job.meta) : null;
    const producer = extracted && api.trace.getSpanContext(extracted);
    const linked = Boolean(producer && api.trace.isSpanContextValid(producer));
    // a root unless a child: the context the worker runs in is no job's parent
    const parent = linked && this.child ? extracted : api.ROOT_CONTEXT;
    const span = this.tracer.startSpan(this.name, {
      kind: api.SpanKind.CONSUMER,
      links: linked && !this.child ? [{ context: producer }] : [],
      attributes: {
        ...this.attributes,
        "messaging.message.id": String(job.id),
        "messaging.message.body.size": job.payload.length,
        "messaging.leaseq.message.delivery_count": job.deliveries,
      },
    }, parent);
    try {
      return await api.context.with(api.trace.setSpan(parent, span), fn, undefined, new JobSpan(span, this.describe));
    } finally {
      span.end();
    }
  }
}

class JobSpan {
  constructor(span, describe) {
    this.span = span;
    this.describe = describe;
  }

  /** How the job ended: an ack leaves the status unset (as the conventions ask); a nack (a retry or
   * a dead letter), a lease lost and a job abandoned at close are ERROR, a thrown error recorded. */
  ended(outcome, failure) {
    this.span.setAttribute("leaseq.job.outcome", outcome);
    if (failure !== null && failure !== undefined) {
      this.span.recordException(failure instanceof Error ? failure : { name: "ThrownValue", message: String(failure) });
      this.span.setStatus({ code: api.SpanStatusCode.ERROR, message: this.describe(failure) });
    } else if (outcome !== "acked") {
      this.span.setStatus({ code: api.SpanStatusCode.ERROR, message: "lease lost: the job was not acked" });
    }
    return outcome;
  }
}

const NO_SPAN = { ended: (outcome) => outcome };

/** server.address and server.port of an ioredis client connected by host and port (none for a Unix
 * socket or Sentinel's primary, which changes). */
function serverAttributes(client) {
  const options = client?.options ?? {};
  if (options.path || options.sentinels || typeof options.host !== "string") return {};
  return { "server.address": options.host, ...(Number.isInteger(options.port) ? { "server.port": options.port } : {}) };
}
