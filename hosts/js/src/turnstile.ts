// `Turnstile.load()` makes one independent instance of the component; from it come policies
// (`resolve`) and admission controllers; a `Scheduler` is made from a policy.
import { instantiate } from './component/turnstile.js';
import type * as wc from './component/interfaces/turnstile-scheduler-config.js';
import { Admission } from './admission.js';
import * as convert from './convert.js';
import { ConfigError } from './errors.js';
import { needsFreeInstance, setFreeInstance } from './free.js';
import { Held, Instance, type CoreModuleLoader } from './instance.js';
import { layersIn, type LayerInput } from './layers.js';
import { explainIn } from './scheduler.js';
import type { AdmissionConfig, Diagnostic, Reason, ToolPolicy } from './types.js';
import { boolean, func, record, string, u32 } from './validate.js';

let defaultLoader: CoreModuleLoader | undefined;

/** @internal Set by the entry point (`node`, `browser` or universal). */
export function setDefaultLoader(loader: CoreModuleLoader): void {
  defaultLoader = loader;
}

const compiled = new Map<string, Promise<WebAssembly.Module>>();
function cached(name: string): Promise<WebAssembly.Module> {
  let module = compiled.get(name);
  if (!module) {
    module = defaultLoader!(name);
    compiled.set(name, module);
    module.catch(() => compiled.delete(name));
  }
  return module;
}

/** @internal A fresh instance made with the default loader, for the package's own use (the
 * shared keys' rules, `shared/component.ts`). */
export async function instantiateDefault(): Promise<Instance> {
  return new Instance(await instantiate(cached, {}));
}

export interface LoadOptions {
  /** Loads a core module by file name (`turnstile.core.wasm`, ...), for hosts that serve the
   * files elsewhere. Default: next to the package's `dist/component/` (compiled once per process). */
  coreModule?: CoreModuleLoader;
  /** @internal For tests that simulate a trap. */
  instantiateCore?: (module: WebAssembly.Module, imports: WebAssembly.Imports) => Promise<WebAssembly.Instance>;
}

/** One instance of the component. Instances share nothing; load as many as you need. */
export class Turnstile {
  readonly #instance: Instance;

  private constructor(instance: Instance) {
    this.#instance = instance;
  }

  /** Compiles (once per process) and instantiates the component. */
  static async load(options: LoadOptions = {}): Promise<Turnstile> {
    const o = record(options, 'options', ['coreModule', 'instantiateCore']);
    if (o.coreModule !== undefined) func(o.coreModule, 'options.coreModule');
    if (o.instantiateCore !== undefined) func(o.instantiateCore, 'options.instantiateCore');
    const root = await instantiate(options.coreModule ?? cached, {}, options.instantiateCore as never);
    // The package's own instance for the component's free functions (`RateLimitedError.fromHeader`,
    // `classOf`), made once (and again after it broke), never the caller's.
    if (needsFreeInstance()) setFreeInstance(new Instance(await instantiate(options.coreModule ?? cached, {})));
    return new Turnstile(new Instance(root));
  }

  /** True once the instance trapped; every use then throws `InstanceBrokenError`. */
  get broken(): boolean {
    return this.#instance.broken !== undefined;
  }

  /** Resolves layers, lowest precedence first: TOML text or plain objects of the same shape
   * (see `LayerInput`). Throws `ConfigError` with every diagnostic, `TypeError` for a wrong shape. */
  resolve(layers: readonly LayerInput[]): Policy {
    const input = layersIn(layers);
    const instance = this.#instance;
    const raw = instance.call(
      () => instance.root.config.Policy.resolve(input),
      (payload) => new ConfigError(convert.diagnostics(payload as wc.Diagnostic[])),
    );
    return new Policy(instance, raw);
  }

  /** The sentence for an entry settled with `reason`, to show a user or hand back to the model
   * as the call's result (`"not run: the batch was cancelled"`, `"not run: stopped after
   * del#1 failed (...)"`); `label` is the entry's (`call` or `call#i`). The component owns these
   * texts, so every host (JavaScript, Python, Rust) says exactly the same. The driver's settled
   * outcomes and `CallSettledError` already carry it as `message`. */
  explain(label: string, reason: Reason): string {
    return explainIn(this.#instance, label, reason);
  }

  /** An admission controller for one binding (one shared MCP connection). Each controller gets
   * a fresh random tag, so its tickets are its own: another controller's ticket (or permit) is
   * refused as unknown, never taken for one of its requests. Tickets are not 1, 2, 3, ... */
  admission(config: AdmissionConfig): Admission {
    const c = record(config, 'config', ['maxConcurrent', 'allowParallel']);
    const wit = {
      maxConcurrent: u32(c.maxConcurrent, 'config.maxConcurrent'),
      allowParallel: boolean(c.allowParallel, 'config.allowParallel'),
      tag: globalThis.crypto.getRandomValues(new BigUint64Array(1))[0],
    };
    const instance = this.#instance;
    return new Admission(instance, instance.call(() => new instance.root.admission.Admission(wit)));
  }
}

/** A validated config. Immutable; any number of schedulers can be made from one. */
export class Policy {
  /** @internal */
  readonly held: Held<wc.Policy>;

  /** @internal Policies come from `Turnstile.resolve`. */
  constructor(instance: Instance, raw: wc.Policy) {
    this.held = new Held(instance, raw, this, 'this policy');
  }
  /** The warnings of this resolved policy (`unknown-field-typo`, ...), in source order; empty
   * for most configs. A config that fails to resolve lists its warnings after its errors. */
  warnings(): Diagnostic[] {
    const raw = this.held.get();
    return convert.diagnostics(this.held.instance.call(() => raw.warnings()));
  }
  /** One tool's policy (an unconfigured tool is unbounded without fan-out). */
  tool(name: string): ToolPolicy {
    string(name, 'name');
    const raw = this.held.get();
    return convert.toolPolicy(this.held.instance.call(() => raw.tool(name)));
  }
  /** Every configured tool, in configuration order. */
  tools(): ToolPolicy[] {
    const raw = this.held.get();
    return this.held.instance.call(() => raw.tools()).map(convert.toolPolicy);
  }
  /** What the policy means to a scheduler, as 64 bits: equal for policies that schedule alike.
   * A saved state records it (`SavedState.policy`), so a host can tell before `resume` whether
   * the policy changed since the state was saved. */
  fingerprint(): bigint {
    const raw = this.held.get();
    return this.held.instance.call(() => raw.fingerprint());
  }
  /** Frees the policy (schedulers made from it keep a copy). */
  dispose(): void {
    this.held.dispose();
  }
  [Symbol.dispose](): void {
    this.dispose();
  }
}

export type { Diagnostic };
