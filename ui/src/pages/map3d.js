import * as THREE from 'three';
import { OrbitControls } from 'three/addons/controls/OrbitControls.js';
import { get } from '../api.js';
import { errorBox, field, h, KINDS, when, fill } from '../dom.js';

// The 3D memory map: GET /viz/graph's nodes at their stored projection, pulled a little
// together along their edges; colour by kind, size by importance, opacity by decay; a time scrubber
// that replays memories appearing, decaying and being superseded.

const KIND_COLOURS = {
  episodic: 0x4a90e2, semantic: 0x3fbf6f, working: 0xf7d354, document: 0x9aa0a6, procedural: 0xa66bd8, core: 0xffffff,
};
const RELATIONS = {
  supersedes: { colour: 0xe5484d, alpha: () => 0.95, label: 'supersedes' },
  evidence: { colour: 0xf5a623, alpha: () => 0.85, label: 'evidence' },
  same_thread: { colour: 0x4a90e2, alpha: () => 0.6, label: 'same thread' },
  entity_overlap: { colour: 0x9aa0a6, alpha: (w) => Math.max(0.15, Math.min(1, w)), label: 'entity overlap (opacity = weight)' },
};
// The projection is scaled to about [-1, 1]; the scene is laid out at this size.
const SPREAD = 60;
const LAYOUT = { iterations: 300, spring: 0.04, rest: 6, anchor: 0.015, step: 0.9 };
const SCRUB_STEPS = 1000;
const PULSE_MAX_NODES = 1500;

export async function map3dPage(root, { params, replaceParams, navigate }) {
  const scope = h('input', { type: 'text', name: 'scope', value: params.get('scope') || '', placeholder: 'default: this project + shared' });
  const chosen = new Set((params.get('kinds') || '').split(',').filter(Boolean));
  const kindBoxes = KINDS.map((k) => h('input', { type: 'checkbox', name: 'kinds', value: k, checked: !chosen.size || chosen.has(k) }));
  const limit = h('input', { type: 'number', name: 'limit', min: 1, max: 5000, value: params.get('limit') || '2000' });
  const form = h('form', { class: 'toolbar' },
    field('Scope', scope),
    h('fieldset', { class: 'kinds' }, h('legend', {}, 'Kinds'), kindBoxes.map((box) =>
      h('label', { class: 'kind-check' }, box, h('span', { class: 'swatch', style: `background:${css(KIND_COLOURS[box.value])}` }), box.value))),
    field('Node budget', limit),
    h('button', { type: 'submit' }, 'Show'));
  const status = h('p', { class: 'muted', 'aria-live': 'polite' }, 'Loading the graph…');
  const stage = h('div', { class: 'stage', tabindex: 0, role: 'application', 'aria-label': '3D memory map: drag or use the arrow keys to move, scroll or +/- to zoom; click a point to open its memory', 'data-node-count': '0' });
  const tooltip = h('div', { class: 'tooltip', role: 'tooltip', hidden: true });
  stage.append(tooltip);
  const scrub = h('input', { type: 'range', name: 'time', min: 0, max: SCRUB_STEPS, value: SCRUB_STEPS, 'aria-label': 'Time: show the store as it was then' });
  const scrubLabel = h('output', { class: 'scrub-label' }, 'now');
  const play = h('button', { type: 'button' }, '▶ Replay');
  const legend = h('div', { class: 'legend' },
    KINDS.map((k) => h('span', {}, h('span', { class: 'swatch', style: `background:${css(KIND_COLOURS[k])}` }), k)),
    Object.values(RELATIONS).map((r) => h('span', {}, h('span', { class: 'line-swatch', style: `background:${css(r.colour)}` }), r.label)),
    h('span', { class: 'muted' }, 'size = importance · opacity = decay · dimmed = superseded'));
  const list = h('div', {});
  root.append(h('h1', { id: 'page-title' }, '3D memory map'), form, status, stage,
    h('div', { class: 'scrubber' }, play, scrub, scrubLabel), legend, list);

  const view = createView(stage, tooltip, (id) => navigate('memory', id));
  let graph = null;
  let timer = null;

  function currentTime() {
    if (!graph) return Date.now();
    const v = Number(scrub.value) / SCRUB_STEPS;
    return graph.t0 + (graph.t1 - graph.t0) * v;
  }

  function applyTime() {
    if (!graph) return;
    const t = currentTime();
    scrubLabel.textContent = Number(scrub.value) >= SCRUB_STEPS ? 'now' : new Date(t).toLocaleString();
    const shown = view.setTime(t);
    stage.dataset.nodeCount = String(shown);
    const ids = graph.nodes.filter((n) => n.created <= t).map((n) => n.id);
    window.__hmMap = { nodes: shown, ids, edges: view.edgeCount(), total: graph.total, truncated: graph.truncated, ready: true, at: view.screenOf };
    status.textContent = `${shown} of ${graph.nodes.length} nodes shown${graph.truncated ? ` (the ${graph.nodes.length} most important of ${graph.total}: raise the node budget or narrow the filters)` : ''}; ${graph.edges.length} edges; projection: ${graph.projection || 'unknown'}.`;
  }

  async function load() {
    const kinds = kindBoxes.filter((b) => b.checked).map((b) => b.value);
    const next = new URLSearchParams();
    if (scope.value.trim()) next.set('scope', scope.value.trim());
    if (kinds.length !== KINDS.length) next.set('kinds', kinds.join(','));
    if (limit.value && limit.value !== '2000') next.set('limit', limit.value);
    replaceParams('map', next);
    stage.dataset.ready = '0';
    window.__hmMap = { nodes: 0, ready: false };
    status.textContent = 'Loading the graph…';
    if (!kinds.length) {
      view.setGraph({ nodes: [], edges: [] });
      stage.dataset.nodeCount = '0';
      window.__hmMap = { nodes: 0, ids: [], edges: 0, total: 0, ready: true };
      status.textContent = 'Choose at least one kind.';
      stage.dataset.ready = '1';
      return;
    }
    let answer;
    try {
      answer = await get('/viz/graph', { scope: scope.value.trim(), kinds: kinds.length === KINDS.length ? null : kinds, limit: limit.value });
    } catch (err) {
      fill(status, errorBox(err));
      window.__hmMap = { nodes: 0, ready: true, error: err.message };
      stage.dataset.ready = '1';
      return;
    }
    graph = prepare(answer);
    view.setGraph(graph);
    scrub.value = String(SCRUB_STEPS);
    applyTime();
    fill(list, topList(graph));
    stage.dataset.ready = '1';
  }

  form.addEventListener('submit', (event) => { event.preventDefault(); load(); });
  scrub.addEventListener('input', applyTime);
  play.addEventListener('click', () => {
    if (timer) { clearInterval(timer); timer = null; play.textContent = '▶ Replay'; return; }
    scrub.value = '0';
    play.textContent = '■ Stop';
    timer = setInterval(() => {
      scrub.value = String(Math.min(SCRUB_STEPS, Number(scrub.value) + 10));
      applyTime();
      if (Number(scrub.value) >= SCRUB_STEPS) { clearInterval(timer); timer = null; play.textContent = '▶ Replay'; }
    }, 50);
  });
  await load();
  return () => { if (timer) clearInterval(timer); view.dispose(); delete window.__hmMap; };
}

function css(hex) {
  return `#${hex.toString(16).padStart(6, '0')}`;
}

// Times as numbers, the successor's creation for each superseded node, and the force layout.
function prepare(answer) {
  const nodes = (answer.nodes || []).map((n) => ({
    ...n,
    created: Date.parse(n.created_at) || 0,
    archived: n.archived_at ? Date.parse(n.archived_at) : Infinity,
  }));
  const byId = new Map(nodes.map((n, i) => [n.id, i]));
  const edges = (answer.edges || []).filter((e) => byId.has(e.source) && byId.has(e.target))
    .map((e) => ({ ...e, s: byId.get(e.source), t: byId.get(e.target) }));
  for (const n of nodes) {
    const next = n.superseded_by && byId.has(n.superseded_by) ? nodes[byId.get(n.superseded_by)] : null;
    // A successor outside the subgraph: superseded from the start of the replay's knowledge.
    n.supersededAt = n.superseded_by ? (next ? next.created : n.created) : Infinity;
  }
  const now = Date.now();
  const t0 = nodes.reduce((m, n) => Math.min(m, n.created), now - 1000);
  // The scrubber's end shows every node, even with this browser's clock behind the server's.
  const t1 = nodes.reduce((m, n) => Math.max(m, n.created), now);
  layout(nodes, edges);
  return { nodes, edges, byId, total: answer.total ?? nodes.length, truncated: Boolean(answer.truncated), projection: answer.projection, t0, t1 };
}

// Springs along the edges, each node tied to its projected position by a weak anchor, a few hundred
// steps before the first frame: related memories move together while the map keeps the
// projection's geography. O(edges) per step.
function layout(nodes, edges) {
  const n = nodes.length;
  const p = new Float32Array(n * 3);
  const anchor = new Float32Array(n * 3);
  nodes.forEach((node, i) => {
    const pos = Array.isArray(node.position) && node.position.length === 3 ? node.position : [0, 0, 0];
    for (let k = 0; k < 3; k++) { p[i * 3 + k] = anchor[i * 3 + k] = (Number(pos[k]) || 0) * SPREAD; }
  });
  const f = new Float32Array(n * 3);
  for (let it = 0; it < LAYOUT.iterations && edges.length; it++) {
    f.fill(0);
    for (const e of edges) {
      const a = e.s * 3;
      const b = e.t * 3;
      const dx = p[b] - p[a]; const dy = p[b + 1] - p[a + 1]; const dz = p[b + 2] - p[a + 2];
      const len = Math.sqrt(dx * dx + dy * dy + dz * dz) || 1e-6;
      const pull = LAYOUT.spring * (e.weight > 0 ? e.weight : 0.5) * (len - LAYOUT.rest) / len;
      f[a] += dx * pull; f[a + 1] += dy * pull; f[a + 2] += dz * pull;
      f[b] -= dx * pull; f[b + 1] -= dy * pull; f[b + 2] -= dz * pull;
    }
    const cool = LAYOUT.step * (1 - it / LAYOUT.iterations);
    for (let i = 0; i < n * 3; i++) p[i] += cool * (f[i] + LAYOUT.anchor * (anchor[i] - p[i]));
  }
  nodes.forEach((node, i) => { node.xyz = [p[i * 3], p[i * 3 + 1], p[i * 3 + 2]]; });
}

// The decay at time t, replayed: the API gives each node's recency factor now; it is assumed to
// have fallen exponentially from 1 at creation, so at t it is decay^((t - created) / (now - created)).
function decayAt(node, t, now) {
  const d = typeof node.decay === 'number' ? Math.min(1, Math.max(0, node.decay)) : 1;
  const life = now - node.created;
  if (life <= 0 || d >= 1) return d;
  return d ** Math.max(0, (t - node.created) / life);
}

function topList(graph) {
  const top = [...graph.nodes].sort((a, b) => (b.importance || 0) - (a.importance || 0) || b.created - a.created).slice(0, 25);
  if (!top.length) return h('p', { class: 'muted' }, 'No memories match these filters.');
  return h('details', { class: 'panel' }, h('summary', {}, `The ${top.length} most important memories on the map (keyboard access)`),
    h('ul', {}, top.map((n) => h('li', {}, h('a', { href: `#/memory/${n.id}` }, n.label || n.id), h('span', { class: 'muted' }, ` · ${n.kind} · ${n.scope} · ${when(n.created_at)}`)))));
}

const VERTEX = `
attribute float size;
attribute float alpha;
attribute vec3 nodeColor;
attribute float pulse;
uniform float scale;
uniform float time;
varying vec3 vColor;
varying float vAlpha;
void main() {
  vColor = nodeColor;
  vAlpha = alpha;
  vec4 mv = modelViewMatrix * vec4(position, 1.0);
  float s = size * (1.0 + 0.25 * pulse * sin(time * 4.0));
  gl_PointSize = max(1.5, s * scale / -mv.z);
  gl_Position = projectionMatrix * mv;
}`;
const FRAGMENT = `
varying vec3 vColor;
varying float vAlpha;
void main() {
  vec2 c = gl_PointCoord * 2.0 - 1.0;
  float r2 = dot(c, c);
  if (r2 > 1.0 || vAlpha <= 0.0) discard;
  float shade = 0.55 + 0.45 * sqrt(1.0 - r2);
  gl_FragColor = vec4(vColor * shade, vAlpha * smoothstep(1.0, 0.8, r2));
}`;

function createView(stage, tooltip, open) {
  const renderer = new THREE.WebGLRenderer({ antialias: true, preserveDrawingBuffer: true });
  renderer.setPixelRatio(Math.min(window.devicePixelRatio || 1, 2));
  renderer.setClearColor(0x0e1220);
  stage.prepend(renderer.domElement);
  const scene = new THREE.Scene();
  const camera = new THREE.PerspectiveCamera(55, 1, 0.1, 5000);
  camera.position.set(0, 0, SPREAD * 2.6);
  const grid = new THREE.GridHelper(200, 20, 0x2a3354, 0x1b2238);
  scene.add(grid);
  const controls = new OrbitControls(camera, renderer.domElement);
  controls.listenToKeyEvents(stage);
  controls.keyPanSpeed = 20;
  const material = new THREE.ShaderMaterial({
    uniforms: { scale: { value: 300 }, time: { value: 0 } },
    vertexShader: VERTEX, fragmentShader: FRAGMENT, transparent: true, depthWrite: false,
  });
  const edgeMaterial = new THREE.LineBasicMaterial({ vertexColors: true, transparent: true, depthWrite: false });
  let points = null;
  let lines = null;
  let arrows = null;
  // Points and arrows keep their size on screen whatever the layout's extent (the camera backs off with it).
  let worldScale = 1;
  const arrowGeometry = new THREE.ConeGeometry(0.9, 2.6, 8).translate(0, -1.3, 0).rotateX(Math.PI / 2);
  const arrowMaterial = new THREE.MeshBasicMaterial({ color: RELATIONS.supersedes.colour });
  const arrowMatrix = new THREE.Matrix4();
  const hidden = new THREE.Matrix4().makeScale(0, 0, 0);
  const arrowScale = new THREE.Vector3();

  // Each visible supersede edge's cone sits at its target, its tip just short of the point.
  function placeArrows() {
    if (!arrows) return;
    const from = new THREE.Vector3();
    const to = new THREE.Vector3();
    arrows.userData.edges.forEach((e, i) => {
      if (!(visible[e.s] && visible[e.t])) { arrows.setMatrixAt(i, hidden); return; }
      from.fromArray(graph.nodes[e.s].xyz);
      to.fromArray(graph.nodes[e.t].xyz);
      const length = from.distanceTo(to);
      if (length < 1e-3) { arrows.setMatrixAt(i, hidden); return; }
      const tip = from.clone().lerp(to, Math.max(0, 1 - 2 * worldScale / length));
      arrowMatrix.lookAt(to, from, camera.up);
      arrowMatrix.scale(arrowScale.setScalar(1.6 * worldScale));
      arrowMatrix.setPosition(tip);
      arrows.setMatrixAt(i, arrowMatrix);
    });
    arrows.instanceMatrix.needsUpdate = true;
  }
  let graph = { nodes: [], edges: [] };
  let visible = new Uint8Array(0);
  let shownEdges = 0;
  let frame = 0;
  let pulseTimer = null;

  function render() {
    if (frame) return;
    frame = requestAnimationFrame(() => { frame = 0; renderer.render(scene, camera); });
  }

  function resize() {
    const width = stage.clientWidth || 800;
    const height = stage.clientHeight || 500;
    renderer.setSize(width, height);
    camera.aspect = width / height;
    camera.updateProjectionMatrix();
    material.uniforms.scale.value = height * 0.8 * worldScale;
    render();
  }
  const observer = new ResizeObserver(resize);
  observer.observe(stage);
  resize();
  controls.addEventListener('change', render);

  function clear() {
    for (const obj of [points, lines, arrows]) {
      if (obj) { scene.remove(obj); obj.geometry.dispose(); }
    }
    points = null; lines = null; arrows = null;
  }

  function setGraph(next) {
    clear();
    graph = next;
    const n = graph.nodes.length;
    visible = new Uint8Array(n);
    const geometry = new THREE.BufferGeometry();
    const pos = new Float32Array(n * 3);
    const colour = new Float32Array(n * 3);
    const size = new Float32Array(n);
    const pulse = new Float32Array(n);
    const c = new THREE.Color();
    // Crowded maps draw smaller points, so thousands of memories stay apart.
    const density = Math.min(1, Math.cbrt(100 / Math.max(1, n)));
    graph.nodes.forEach((node, i) => {
      pos.set(node.xyz || [0, 0, 0], i * 3);
      c.setHex(KIND_COLOURS[node.kind] ?? 0xcccccc);
      colour.set([c.r, c.g, c.b], i * 3);
      size[i] = density * (4 + 3 * Math.sqrt(Math.max(0, node.importance ?? 1)));
      pulse[i] = node.kind === 'working' ? 1 : 0;
    });
    geometry.setAttribute('position', new THREE.BufferAttribute(pos, 3));
    geometry.setAttribute('nodeColor', new THREE.BufferAttribute(colour, 3));
    geometry.setAttribute('size', new THREE.BufferAttribute(size, 1));
    geometry.setAttribute('pulse', new THREE.BufferAttribute(pulse, 1));
    geometry.setAttribute('alpha', new THREE.BufferAttribute(new Float32Array(n), 1));
    geometry.computeBoundingSphere();
    points = new THREE.Points(geometry, material);
    const lineGeometry = new THREE.BufferGeometry();
    const lpos = new Float32Array(graph.edges.length * 6);
    graph.edges.forEach((e, i) => {
      lpos.set(graph.nodes[e.s].xyz, i * 6);
      lpos.set(graph.nodes[e.t].xyz, i * 6 + 3);
    });
    lineGeometry.setAttribute('position', new THREE.BufferAttribute(lpos, 3));
    lineGeometry.setAttribute('color', new THREE.BufferAttribute(new Float32Array(graph.edges.length * 8), 4));
    lines = new THREE.LineSegments(lineGeometry, edgeMaterial);
    scene.add(lines);
    scene.add(points);
    // Supersede edges are arrows: a cone at the older memory's end, pointing at it.
    const supersedes = graph.edges.filter((e) => e.relation === 'supersedes');
    arrows = new THREE.InstancedMesh(arrowGeometry, arrowMaterial, Math.max(1, supersedes.length));
    arrows.count = supersedes.length;
    arrows.userData.edges = supersedes;
    scene.add(arrows);
    if (n) {
      const sphere = geometry.boundingSphere;
      controls.target.copy(sphere.center);
      worldScale = Math.max(0.2, sphere.radius / SPREAD);
      resize();
      camera.position.set(sphere.center.x + sphere.radius * 0.5, sphere.center.y + sphere.radius * 0.6, sphere.center.z + Math.max(20, sphere.radius * 1.9));
      // A faint floor under the cloud gives the eye depth to read.
      grid.position.set(sphere.center.x, sphere.center.y - sphere.radius * 1.05, sphere.center.z);
      grid.scale.setScalar(Math.max(10, sphere.radius) / 50);
      controls.update();
    }
    if (pulseTimer) { clearInterval(pulseTimer); pulseTimer = null; }
    // Working memories pulse (they are transient): a slow timer redraws the scene, so it runs only on
    // maps small enough to redraw cheaply without a GPU, and never for people who asked for less motion.
    const pulsing = graph.nodes.some((node) => node.kind === 'working') && n <= PULSE_MAX_NODES
      && !window.matchMedia('(prefers-reduced-motion: reduce)').matches;
    if (pulsing) {
      pulseTimer = setInterval(() => {
        if (document.hidden) return;
        material.uniforms.time.value = performance.now() / 1000;
        render();
      }, 120);
    }
    render();
  }

  // Shows the store as it was at time t; answers how many nodes are drawn.
  function setTime(t) {
    if (!points) return 0;
    const now = Date.now();
    const alpha = points.geometry.getAttribute('alpha');
    let shown = 0;
    graph.nodes.forEach((node, i) => {
      let a = 0;
      if (node.created <= t) {
        a = 0.25 + 0.75 * decayAt(node, t, now);
        if (node.supersededAt <= t) a *= 0.3;
        if (node.archived <= t) a *= 0.4;
        shown += 1;
        visible[i] = 1;
      } else {
        visible[i] = 0;
      }
      alpha.array[i] = a;
    });
    alpha.needsUpdate = true;
    const colours = lines.geometry.getAttribute('color');
    const c = new THREE.Color();
    shownEdges = 0;
    graph.edges.forEach((e, i) => {
      const style = RELATIONS[e.relation] || RELATIONS.entity_overlap;
      const on = visible[e.s] && visible[e.t];
      c.setHex(style.colour);
      const a = on ? style.alpha(e.weight ?? 1) : 0;
      if (on) shownEdges += 1;
      colours.array.set([c.r, c.g, c.b, a, c.r, c.g, c.b, a], i * 8);
    });
    colours.needsUpdate = true;
    placeArrows();
    render();
    return shown;
  }

  // Picking in screen space: the nearest drawn node within its radius (or 8 px).
  const v = new THREE.Vector3();
  function pick(clientX, clientY) {
    if (!points) return -1;
    const rect = renderer.domElement.getBoundingClientRect();
    const x = clientX - rect.left;
    const y = clientY - rect.top;
    const sizes = points.geometry.getAttribute('size').array;
    let best = -1;
    let bestD = Infinity;
    graph.nodes.forEach((node, i) => {
      if (!visible[i]) return;
      v.set(node.xyz[0], node.xyz[1], node.xyz[2]).project(camera);
      if (v.z > 1) return;
      const sx = (v.x + 1) / 2 * rect.width;
      const sy = (1 - v.y) / 2 * rect.height;
      const d = Math.hypot(sx - x, sy - y);
      const dist = camera.position.distanceTo(new THREE.Vector3(...node.xyz)) || 1;
      const radius = Math.max(8, sizes[i] * material.uniforms.scale.value / dist / 2);
      if (d < radius && d < bestD) { best = i; bestD = d; }
    });
    return best;
  }

  let hoverFrame = 0;
  function onMove(event) {
    if (hoverFrame) return;
    const { clientX, clientY } = event;
    hoverFrame = requestAnimationFrame(() => {
      hoverFrame = 0;
      const i = pick(clientX, clientY);
      if (i < 0) { tooltip.hidden = true; renderer.domElement.style.cursor = ''; return; }
      const node = graph.nodes[i];
      const rect = stage.getBoundingClientRect();
      fill(tooltip, h('strong', {}, node.label || node.id),
        h('div', { class: 'muted' }, `${node.kind} · ${node.type || ''} · ${node.scope}`),
        h('div', { class: 'muted' }, `created ${when(node.created_at)} · decay ${(node.decay ?? 1).toFixed(2)}${node.superseded_by ? ' · superseded' : ''}${node.stale ? ' · stale' : ''}`));
      tooltip.style.left = `${Math.min(clientX - rect.left + 14, rect.width - 260)}px`;
      tooltip.style.top = `${clientY - rect.top + 14}px`;
      tooltip.hidden = false;
      renderer.domElement.style.cursor = 'pointer';
    });
  }
  let down = null;
  const onDown = (event) => { down = [event.clientX, event.clientY]; };
  const onUp = (event) => {
    if (!down || Math.hypot(event.clientX - down[0], event.clientY - down[1]) > 4) { down = null; return; }
    down = null;
    const i = pick(event.clientX, event.clientY);
    if (i >= 0) open(graph.nodes[i].id);
  };
  const onLeave = () => { tooltip.hidden = true; };
  const onKey = (event) => {
    if (event.key === '+' || event.key === '=') { camera.position.lerp(controls.target, 0.2); controls.update(); }
    if (event.key === '-') { camera.position.sub(controls.target).multiplyScalar(1.25).add(controls.target); controls.update(); }
  };
  renderer.domElement.addEventListener('pointermove', onMove);
  renderer.domElement.addEventListener('pointerdown', onDown);
  renderer.domElement.addEventListener('pointerup', onUp);
  renderer.domElement.addEventListener('pointerleave', onLeave);
  stage.addEventListener('keydown', onKey);

  // Where a drawn node is on the page (client pixels), for tests that hover and click it.
  function screenOf(id) {
    const i = graph.nodes.findIndex((node) => node.id === id);
    if (i < 0 || !visible[i]) return null;
    const rect = renderer.domElement.getBoundingClientRect();
    v.fromArray(graph.nodes[i].xyz).project(camera);
    return [rect.left + (v.x + 1) / 2 * rect.width, rect.top + (1 - v.y) / 2 * rect.height];
  }

  return {
    setGraph,
    setTime,
    screenOf,
    edgeCount: () => shownEdges,
    dispose() {
      if (pulseTimer) clearInterval(pulseTimer);
      if (frame) cancelAnimationFrame(frame);
      observer.disconnect();
      controls.dispose();
      clear();
      material.dispose();
      edgeMaterial.dispose();
      arrowGeometry.dispose();
      arrowMaterial.dispose();
      grid.geometry.dispose();
      grid.material.dispose();
      renderer.dispose();
      stage.removeEventListener('keydown', onKey);
    },
  };
}
