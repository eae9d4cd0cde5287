// Every sentence the playground shows about an entry (why it waits, how it ended, why it was
// settled) comes from `explain`. Waits and settlements are the component's own sentences
// (`inspect()`'s `why`, a `step` settlement's `message`, and `Scheduler.explain(label, reason)`
// for a response the host made), the text every host shows and
// hands to the model; the playground words only what the engine does not (pending, running,
// asking, ended).

/**
 * One plain sentence about one entry.
 * @param {{ label: string, tool?: string, key?: string, state: object, why?: string, message?: string }} status
 *   an entry as `Scheduler.inspect` reports it, or the same shape built from a `step` output
 *   (`{ label, key, state: { kind: 'settled', reason }, message }`) once its batch retired;
 *   `why` (a wait) and `message` (a settlement) are the component's sentences.
 * @returns {string}
 */
export function explain(status) {
  const { label, key, state, why, message } = status;
  // A key set's keys come joined by ` + `: it holds a slot on each.
  const set = key?.includes(' + ') ? key.split(' + ').join(' and ') : undefined;
  const slots = set ? `its slots on keys ${set}` : `its slot on key ${key}`;
  const slot = key === undefined
    ? 'needs no slot (its tool has no concurrency key)'
    : set ? `holds a slot on each of keys ${set}` : `holds a slot on key ${key}`;
  switch (state.kind) {
    case 'pending':
      return `${label} waits for your decision: approve or reject it. Nothing in its batch starts until every entry is decided.`;
    case 'approved':
      return why ? `${label}: ${why}` : `${label} is approved and starts in this step.`;
    case 'running':
      return `${label} is running and ${slot} until it ends.`;
    case 'asking':
      return key === undefined
        ? `${label} asked a question and waits for the answer.`
        : `${label} asked a question and keeps ${slots} while it waits for the answer: another call slipping in would see half its work.`;
    case 'ended':
      return state.outcome === 'ok'
        ? `${label} ended ok${key === undefined ? '' : ` and freed ${slots}`}.`
        : `${label} failed${key === undefined ? '' : ` and freed ${slots}`}; a failure stops nothing else, except later operations of its call under on_error = "stop".`;
    case 'settled':
      return `${label}: ${message}`;
    default:
      return `${label} is ${state.kind}.`;
  }
}
