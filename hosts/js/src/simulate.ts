// `turnstile simulate`: the component's timeline of batches on a virtual clock (its `simulate`
// interface). The CLI only reads the files and flags; the component reads the case file, runs
// the scheduler and writes every line and every error, so this CLI, the Python package's and
// the Rust harness's print the same for the same input.
import type * as wsim from './component/interfaces/turnstile-scheduler-simulate.js';
import type * as wc from './component/interfaces/turnstile-scheduler-config.js';
import { instantiateDefault } from './turnstile.js';

/** What to simulate: the CLI's file and flags as the user gave them (the component reads them,
 * so every rule and message about them is the same in every Turnstile CLI). */
export interface SimulateInput {
  file?: { name: string; text: string };
  layers: { name: string; text: string }[];
  calls: string[];
  /** `--duration` values: `MS` or `LABEL=MS`. */
  durations: string[];
  fail: string[];
}

/** A simulation: the config's warnings, rendered (print them first), and the timeline. */
export interface Simulated {
  warnings: string[];
  timeline: string;
}

/** Why nothing was simulated: the component's sentence (or every diagnostic, rendered) and the
 * exit status a CLI gives it (2 for a usage mistake, 1 otherwise). */
export class SimulateError extends Error {
  /** The component's kind: `config` (the message is every diagnostic, rendered), `not-a-case`,
   * `usage`, `nothing` or `input`. */
  readonly kind: wsim.Error['tag'];
  readonly exitStatus: 1 | 2;
  constructor(kind: wsim.Error['tag'], message: string) {
    super(message);
    this.name = 'SimulateError';
    this.kind = kind;
    this.exitStatus = kind === 'usage' || kind === 'nothing' ? 2 : 1;
  }
}

function refused(payload: unknown): Error {
  const e = payload as wsim.Error;
  if (e.tag === 'config') return new SimulateError(e.tag, (e.val as wc.Diagnostic[]).map((d) => d.rendered).join('\n'));
  return new SimulateError(e.tag, e.val);
}

/** The warnings and the timeline; throws `SimulateError` when nothing could be simulated. */
export async function simulate(input: SimulateInput): Promise<Simulated> {
  const instance = await instantiateDefault();
  const wit: wsim.Input = { layers: input.layers, calls: input.calls, durations: input.durations, fail: input.fail };
  if (input.file !== undefined) wit.file = input.file;
  const out = instance.call(() => instance.root.simulate.run(wit), refused);
  return { warnings: out.warnings.map((d) => d.rendered), timeline: out.timeline };
}

/** `PROGRAM simulate --help`, the component's text. */
export async function simulateHelp(program: string): Promise<string> {
  const instance = await instantiateDefault();
  return instance.call(() => instance.root.simulate.help(program));
}
