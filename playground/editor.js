// One config layer's editor. The text is shown once, in a textarea; behind it a backdrop laid
// out the same way (same font, padding, wrapping) carries the diagnostics: every span is
// underlined, and a span with nothing visible to underline (empty, or only a line break, as
// TOML syntax errors at the end of a line are) gets a marker.

/**
 * @param {{ name: string, text: string }} layer
 * @param {{ onInput: () => void, onRemove: () => void }} hooks
 */
export function layerEditor(layer, hooks) {
  const element = document.createElement('section');
  element.className = 'layer';
  element.innerHTML = `<div class="layer-head">
      <label>Layer <input type="text" class="layer-name" spellcheck="false"></label>
      <button type="button" class="remove">Remove</button>
    </div>
    <div class="editor">
      <pre class="backdrop" aria-hidden="true"></pre>
      <textarea class="layer-text" spellcheck="false" autocomplete="off" autocapitalize="off"></textarea>
    </div>`;
  const name = element.querySelector('.layer-name');
  const text = element.querySelector('.layer-text');
  const backdrop = element.querySelector('.backdrop');
  const remove = element.querySelector('.remove');
  let marks = [];
  name.value = layer.name;
  text.value = layer.text;

  const labelName = () => `layer ${name.value || '(unnamed)'}`;
  const paint = () => {
    text.setAttribute('aria-label', `${labelName()}: TOML`);
    remove.setAttribute('aria-label', `Remove ${labelName()}`);
    paintBackdrop(backdrop, text.value, marks);
  };
  text.addEventListener('input', () => {
    marks = [];
    paint();
    hooks.onInput();
  });
  name.addEventListener('input', () => {
    paint();
    hooks.onInput();
  });
  remove.addEventListener('click', hooks.onRemove);
  paint();

  return {
    element,
    layer: () => ({ name: name.value, text: text.value }),
    /** Underlines these spans: `{ id, start, end, title }`, offsets in bytes (as diagnostics
     * carry them). */
    mark(spans) {
      const toIndex = byteToIndex(text.value);
      marks = spans.map((s) => ({ ...s, start: toIndex(s.start), end: toIndex(s.end) }));
      paint();
    },
    /** Selects a span (bytes) in the textarea, to show a diagnostic's place. */
    select(start, end) {
      const toIndex = byteToIndex(text.value);
      text.focus();
      text.setSelectionRange(toIndex(start), toIndex(end));
    },
  };
}

/** Byte offsets (what spans carry) to string indices, for one layer's text. */
export function byteToIndex(text) {
  const starts = [];
  let bytes = 0;
  for (let i = 0; i < text.length; i++) {
    const code = text.codePointAt(i);
    const n = code < 0x80 ? 1 : code < 0x800 ? 2 : code < 0x10000 ? 3 : 4;
    for (let k = 0; k < n; k++) starts[bytes + k] = i;
    bytes += n;
    if (code > 0xffff) i++;
  }
  return (b) => (b >= bytes ? text.length : starts[b]);
}

function paintBackdrop(backdrop, text, marks) {
  const ranges = [];
  const markers = [];
  for (const m of marks) {
    // Nothing visible to underline: an empty span, or one over line breaks only.
    if (m.end <= m.start || /^[\r\n]*$/.test(text.slice(m.start, m.end))) markers.push(m);
    else ranges.push(m);
  }
  const cuts = new Set([0, text.length]);
  for (const r of ranges) cuts.add(r.start).add(r.end);
  for (const m of markers) cuts.add(m.start);
  const points = [...cuts].sort((a, b) => a - b);
  backdrop.replaceChildren();
  for (let i = 0; i < points.length; i++) {
    const at = points[i];
    for (const m of markers.filter((m) => m.start === at)) backdrop.append(marker(m));
    const to = points[i + 1];
    if (to === undefined) break;
    const over = ranges.filter((r) => r.start <= at && r.end >= to);
    const piece = text.slice(at, to);
    if (!over.length) {
      backdrop.append(piece);
      continue;
    }
    const span = document.createElement('span');
    span.className = 'underline';
    span.dataset.span = over.map((r) => r.id).join(' ');
    span.title = over.map((r) => r.title).join('\n');
    span.textContent = piece;
    backdrop.append(span);
  }
  // A last empty line in the textarea has a height; so must the backdrop's.
  backdrop.append('\u200b');
}

function marker(m) {
  const span = document.createElement('span');
  span.className = 'marker';
  span.dataset.span = m.id;
  span.title = m.title;
  const box = document.createElement('span');
  box.className = 'marker-box';
  span.append(box);
  return span;
}
