// Config layers as the host gives them: TOML text, or plain objects of the same shape, which
// are serialized to TOML here (no dependency: `toml` below) before they cross, so diagnostics
// still name key paths and tools; their spans then point into the generated text (`layerName`
// is the layer's name, and `rendered` shows the generated lines, one table per tool).
import { fail, string } from './validate.js';

/** What `resolve` takes: an array of layers, lowest precedence first. Each layer is
 * `{ name, text }` (TOML), `{ name, value }` (a plain object), a bare TOML string or a bare
 * plain object (named `layer N`, one-based). */
export type LayerInput = string | { name: string; text: string } | { name: string; value: Record<string, unknown> } | Record<string, unknown>;

const isPlain = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v) && (Object.getPrototypeOf(v) === Object.prototype || Object.getPrototypeOf(v) === null);

/** Refuses what TOML cannot say (null, functions, symbols, class instances other than Date)
 * with the key path, instead of dropping it silently. */
function checkValue(value: unknown, path: string): void {
  if (value === undefined || typeof value === 'string' || typeof value === 'boolean' || typeof value === 'number' || typeof value === 'bigint' || value instanceof Date) return;
  if (Array.isArray(value)) {
    value.forEach((v, i) => checkValue(v, `${path}[${i}]`));
    return;
  }
  if (isPlain(value)) {
    for (const [k, v] of Object.entries(value)) checkValue(v, `${path}.${k}`);
    return;
  }
  fail(path, 'a TOML value (string, number, boolean, Date, array or plain object)', value);
}

function toml(value: unknown, name: string): string {
  if (!isPlain(value)) fail(name, 'a plain object', value);
  checkValue(value, name);
  const lines: string[] = [];
  table(value, '', lines);
  return lines.join('\n') + '\n';
}

/** A TOML basic string (also used for keys): JSON's escapes are TOML's, plus DEL. */
const quote = (s: string): string => JSON.stringify(s).replace(/\x7f/g, '\\u007f');

function inline(value: unknown): string {
  if (typeof value === 'string') return quote(value);
  if (typeof value === 'boolean' || typeof value === 'bigint') return String(value);
  if (typeof value === 'number') {
    if (Number.isNaN(value)) return 'nan';
    if (!Number.isFinite(value)) return value > 0 ? 'inf' : '-inf';
    return Object.is(value, -0) ? '-0.0' : String(value);
  }
  if (value instanceof Date) return value.toISOString();
  if (Array.isArray(value)) return `[${value.filter((v) => v !== undefined).map(inline).join(', ')}]`;
  const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined);
  return entries.length ? `{ ${entries.map(([k, v]) => `${key(k)} = ${inline(v)}`).join(', ')} }` : '{}';
}

/** A table's values, then each sub-table under its own `[header]`, down to the tools
 * (`[conversation.tools.NAME]`); deeper tables are inline (`concurrency = { key = "k" }`). */
function table(value: Record<string, unknown>, path: string, lines: string[], depth = 0): void {
  const subtables: [string, Record<string, unknown>][] = [];
  for (const [k, v] of Object.entries(value)) {
    if (v === undefined) continue;
    if (isPlain(v) && depth < 3) subtables.push([k, v]);
    else lines.push(`${key(k)} = ${inline(v)}`);
  }
  for (const [k, v] of subtables) {
    const sub = path ? `${path}.${key(k)}` : key(k);
    const leaves = Object.values(v).some((x) => x !== undefined && (!isPlain(x) || depth + 1 >= 3));
    // A table with only sub-tables needs no header of its own.
    if (leaves || Object.keys(v).length === 0) lines.push(`[${sub}]`);
    table(v, sub, lines, depth + 1);
  }
}

const key = (k: string): string => (/^[A-Za-z0-9_-]+$/.test(k) ? k : quote(k));

/** The layers as `{ name, text }` for the component. */
export function layersIn(layers: unknown): { name: string; text: string }[] {
  if (!Array.isArray(layers)) fail('layers', 'an array of layers (TOML text or plain objects)', layers);
  return layers.map((layer: unknown, i) => {
    const at = `layers[${i}]`;
    if (typeof layer === 'string') return { name: `layer ${i + 1}`, text: layer };
    if (!isPlain(layer)) fail(at, 'TOML text, { name, text }, { name, value } or a plain object', layer);
    if ('text' in layer) {
      if (Object.keys(layer).some((k) => k !== 'name' && k !== 'text')) throw new TypeError(`${at} has text and other fields: write { name, text }`);
      return { name: layer.name === undefined ? `layer ${i + 1}` : string(layer.name, `${at}.name`), text: string(layer.text, `${at}.text`) };
    }
    if ('value' in layer && 'name' in layer && Object.keys(layer).length === 2) {
      return { name: string(layer.name, `${at}.name`), text: toml(layer.value, `${at}.value`) };
    }
    return { name: `layer ${i + 1}`, text: toml(layer, at) };
  });
}
