// `@turnstile/scheduler/otel`: the driver's events (`DriverOptions.onEvent`) as OpenTelemetry
// spans and metrics. `@opentelemetry/api` (>= 1.9, < 2) is an optional peer dependency: only this
// entry point imports it. The facts are the driver's (its events, each wait as the component
// reported it); this module only records them.
//
//   const driver = new Driver(scheduler, { onEvent: otelEvents() });
//
// Spans: one `wait_for {tool}` span (kind INTERNAL) per execution that started after a wait, from
// the entry's approval (or its rate-limited end) to its start, with `gen_ai.operation.name` =
// `wait_for`, `gen_ai.tool.name`, `gen_ai.tool.call.id` (the entry's label), `turnstile.key` (its
// first key), `turnstile.keys`, `turnstile.wait.reason` (the kind of the last wait the component
// reported) and `turnstile.wait.ms`. It follows the GenAI semantic conventions' `execute_tool
// {tool}` naming; the framework's own `execute_tool` span is separate.
//
// Metrics, each data point with `turnstile.key` (one per key of the entry; none for an unbounded
// entry): `turnstile.wait.duration` (histogram, ms, every start, with `turnstile.wait.reason`
// when it waited), `turnstile.running` and `turnstile.waiting` (up-down counters),
// `turnstile.rate_limited` (executions that ended with a rate limit), `turnstile.retries` (starts
// after a rate-limited end) and `turnstile.settlements` (with `turnstile.settle.reason`).
import { metrics, SpanKind, trace, type Attributes, type HrTime, type Meter, type MeterProvider, type Tracer, type TracerProvider } from '@opentelemetry/api';
import type { DriverEvent } from './driver.js';
import { record } from './validate.js';

export interface OtelEventsOptions {
  /** Default: `tracerProvider.getTracer('@turnstile/scheduler')` (the global provider). */
  tracer?: Tracer;
  /** Default: `meterProvider.getMeter('@turnstile/scheduler')` (the global provider). */
  meter?: Meter;
  tracerProvider?: TracerProvider;
  meterProvider?: MeterProvider;
}

const SCOPE = '@turnstile/scheduler';

/** What the recorder keeps per entry between its events (dropped at its last one). */
interface Seen {
  waiting: boolean;
  running: boolean;
  /** Its last execution ended with a rate limit: its next start is a retry. */
  limited: boolean;
}

/** An `onEvent` hook (for `Driver`, `Gate`, `limitTools`, ...) that records the driver's events
 * as OpenTelemetry spans and metrics (see the module doc). */
export function otelEvents(options: OtelEventsOptions = {}): (event: DriverEvent) => void {
  const o = record(options, 'options', ['tracer', 'meter', 'tracerProvider', 'meterProvider']) as OtelEventsOptions;
  const tracer = o.tracer ?? (o.tracerProvider ?? trace).getTracer(SCOPE);
  const meter = o.meter ?? (o.meterProvider ?? metrics).getMeter(SCOPE);
  const waitDuration = meter.createHistogram('turnstile.wait.duration', { unit: 'ms', description: 'How long an approved tool call waited for its turn before it started' });
  const running = meter.createUpDownCounter('turnstile.running', { unit: '{execution}', description: 'Tool executions running' });
  const waiting = meter.createUpDownCounter('turnstile.waiting', { unit: '{entry}', description: 'Approved entries waiting for their turn' });
  const rateLimited = meter.createCounter('turnstile.rate_limited', { unit: '{execution}', description: 'Tool executions that ended with a rate limit' });
  const retries = meter.createCounter('turnstile.retries', { unit: '{execution}', description: 'Tool executions started again after a rate limit' });
  const settlements = meter.createCounter('turnstile.settlements', { unit: '{entry}', description: 'Entries settled without running, or given up' });
  const seen = new Map<bigint, Seen>();

  /** One data point per key of the entry (one without `turnstile.key` when it has none). */
  const each = (keys: string[], point: (attributes: Attributes) => void, extra?: Attributes) => {
    if (keys.length === 0) point({ ...extra });
    else for (const key of keys) point({ 'turnstile.key': key, ...extra });
  };

  return (event) => {
    const keys = event.keys;
    let s = seen.get(event.entry);
    switch (event.type) {
      case 'wait':
        if (s === undefined) seen.set(event.entry, (s = { waiting: false, running: false, limited: false }));
        if (!s.waiting) {
          s.waiting = true;
          each(keys, (a) => waiting.add(1, a));
        }
        return;
      case 'start': {
        if (s === undefined) seen.set(event.entry, (s = { waiting: false, running: false, limited: false }));
        if (s.waiting) each(keys, (a) => waiting.add(-1, a));
        if (s.limited) each(keys, (a) => retries.add(1, a));
        if (!s.running) each(keys, (a) => running.add(1, a));
        s.waiting = s.limited = false;
        s.running = true;
        const reason = event.wait?.kind;
        each(keys, (a) => waitDuration.record(event.waitedMs, a), reason === undefined ? undefined : { 'turnstile.wait.reason': reason });
        // Only a start the component saw waiting (a `wait` event): not the millisecond or two
        // between a release and its start.
        if (event.wait !== undefined) {
          // The driver's clock may be virtual or monotonic: the span ends now, by the wall clock,
          // and lasts what the driver measured.
          const end = Date.now();
          const attributes: Attributes = {
            'gen_ai.operation.name': 'wait_for',
            'gen_ai.tool.name': event.tool,
            'gen_ai.tool.call.id': event.label,
            'turnstile.keys': keys,
            'turnstile.wait.ms': event.waitedMs,
          };
          if (keys.length) attributes['turnstile.key'] = keys[0];
          if (reason !== undefined) attributes['turnstile.wait.reason'] = reason;
          tracer.startSpan(`wait_for ${event.tool}`, { kind: SpanKind.INTERNAL, startTime: hrTime(end - event.waitedMs), attributes }).end(hrTime(end));
        }
        return;
      }
      case 'end':
        if (s?.running) each(keys, (a) => running.add(-1, a));
        if (event.status === 'rate-limited') {
          each(keys, (a) => rateLimited.add(1, a));
          seen.set(event.entry, { waiting: false, running: false, limited: true });
        } else seen.delete(event.entry);
        return;
      case 'settled':
        if (s?.waiting) each(keys, (a) => waiting.add(-1, a));
        // Given up while it ran (`timed-out`): its slot is free.
        if (s?.running) each(keys, (a) => running.add(-1, a));
        each(keys, (a) => settlements.add(1, a), { 'turnstile.settle.reason': event.reason.kind });
        seen.delete(event.entry);
        return;
    }
  };
}

/** Epoch milliseconds as OpenTelemetry's `[seconds, nanoseconds]` (a plain number under the
 * process's `performance.timeOrigin` would be read as a `performance.now()` time). */
function hrTime(ms: number): HrTime {
  const whole = Math.floor(ms);
  const seconds = Math.floor(whole / 1000);
  return [seconds, (whole - seconds * 1000) * 1e6 + Math.round((ms - whole) * 1e6)];
}
