// The component runs here, off the page's thread: the page posts `{ id, load: scenario }` or
// `{ id, act: action }` and gets back `{ id, view }` (or `{ id, error }`), in order. The package
// is imported as built (its `browser` entry, which fetches the core modules next to it).
import * as api from '../hosts/js/dist/browser.js';
import { Session } from './session.js';

const session = api.Turnstile.load().then((turnstile) => new Session(api, turnstile));

self.onmessage = async ({ data }) => {
  try {
    const s = await session;
    const view = 'load' in data ? s.load(data.load) : s.act(data.act);
    self.postMessage({ id: data.id, view });
  } catch (e) {
    self.postMessage({ id: data.id, error: e instanceof Error ? `${e.name}: ${e.message}` : String(e) });
  }
};
session.then(
  () => self.postMessage({ ready: true, worker: typeof WorkerGlobalScope !== 'undefined' }),
  (e) => self.postMessage({ ready: false, error: `the component failed to load: ${e.message}` }),
);
