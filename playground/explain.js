// Every sentence the playground shows about an entry (why it waits, how it ended, why it was
// settled) comes from `explain`. Waits and settlements are the component's own sentences
// (`inspect()`'s `why`, and `Scheduler.explain(label, reason)`), the text every host shows and
// hands to the model; the playground words only what the engine does not (pending, running,
// asking, ended), and falls back to the structured wait for a status without them.

/**
 * One plain sentence about one entry.
 * @param {{ label: string, tool?: string, key?: string, state: object, wait?: object }} status
 *   an entry as `Scheduler.inspect` reports it, or the same shape built from a `step` output
 *   (`{ label, key, state: { kind: 'settled', reason }, message }`) once its batch retired;
 *   `why` (a wait) and `message` (a settlement) are the component's sentences.
 * @returns {string}
 */
export function explain(status) {
  const { label, key, state, wait, why, message } = status;
  if (state.kind === 'approved' && why) return `${label}: ${why}`;
  if (state.kind === 'settled' && message) return `${label}: ${message}`;
  const slot = key === undefined ? 'needs no slot (its tool has no concurrency key)' : `holds a slot on key ${key}`;
  switch (state.kind) {
    case 'pending':
      return `${label} waits for your decision: approve or reject it. Nothing in its batch starts until every entry is decided.`;
    case 'approved':
      return wait ? waiting(label, key, wait) : `${label} is approved and starts in this step.`;
    case 'running':
      return `${label} is running and ${slot} until it ends.`;
    case 'asking':
      return key === undefined
        ? `${label} asked a question and waits for the answer.`
        : `${label} asked a question and keeps its slot on key ${key} while it waits for the answer: another call slipping in would see half its work.`;
    case 'ended':
      return state.outcome === 'ok'
        ? `${label} ended ok${key === undefined ? '' : ` and freed its slot on key ${key}`}.`
        : `${label} failed${key === undefined ? '' : ` and freed its slot on key ${key}`}; a failure stops nothing else, except later operations of its call under on_error = "stop".`;
    case 'settled':
      return settled(label, state.reason);
    default:
      return `${label} is ${state.kind}.`;
  }
}

function waiting(label, key, wait) {
  switch (wait.kind) {
    case 'batch-not-approved':
      return `${label} is approved and waits for the rest of its batch: ${wait.pending} ${wait.pending === 1 ? 'entry still needs' : 'entries still need'} your decision.`;
    case 'key-full': {
      const holders = list(wait.running);
      const slots = wait.limit === 1 ? 'its only slot' : `all ${wait.limit} of its slots`;
      return `${label} waits for a slot: key ${wait.key} has a limit of ${wait.limit}, and ${holders} ${wait.running.length === 1 ? 'holds' : 'hold'} ${slots}.`;
    }
    case 'behind':
      return `${label} waits behind ${wait.label}, an earlier entry with key ${key} that has not started: entries with one key start in the order they were written.`;
    case 'key-paused':
      return `${label} waits: key ${wait.key} is paused until t = ${wait.until} ms (a rate limit, or a pause by the host).`;
    case 'key-spacing':
      return `${label} waits: key ${wait.key} spaces its starts (delay), so its next start is at t = ${wait.until} ms.`;
    case 'retry-at':
      return `${label} hit a rate limit and runs again at t = ${wait.until} ms.`;
    default:
      return `${label} waits (${wait.kind}).`;
  }
}

function settled(label, reason) {
  const call = label.split('#')[0];
  switch (reason.kind) {
    case 'rejected':
      return `${label} never ran: you rejected it.`;
    case 'skipped':
      return `${label} never ran: it was skipped.`;
    case 'failed':
      return `${label} never ran: the host settled it as failed before it could start.`;
    case 'cancelled':
      return `${label} never ran: its batch was cancelled while it was parked.`;
    case 'stopped':
      return `${label} never ran: ${call}#${reason.after - 1}, an earlier operation of its call, failed, and its tool stops at the first failed operation (on_error = "stop").`;
    case 'interrupted':
      return `${label} was running when the host restarted; its result is unknown, so it is not run again (settled as interrupted).`;
    case 'rate-limited':
      return `${label} was given up: it hit a rate limit once more than its key's ${reason.retries} ${reason.retries === 1 ? 'retry allows' : 'retries allow'}.`;
    default:
      return `${label} never ran (${reason.kind}).`;
  }
}

function list(labels) {
  if (labels.length <= 1) return labels.join('');
  return `${labels.slice(0, -1).join(', ')} and ${labels.at(-1)}`;
}
