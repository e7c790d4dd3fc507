// Bundles the UI (and three.js) into gateway/static/ui, which the gateway serves at /ui and the Python
// package ships: `make run` needs no Node.js and the browser fetches nothing from a CDN.
import { build } from 'esbuild';
import { copyFileSync, mkdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, '..', 'gateway', 'static', 'ui');

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
await build({
  entryPoints: { app: join(here, 'src', 'main.js') },
  bundle: true,
  minify: true,
  format: 'esm',
  target: ['es2020'],
  // app.js for every page; three.js and the 3D map in a chunk of their own, loaded when the map opens.
  splitting: true,
  outdir: out,
  entryNames: '[name]',
  chunkNames: 'chunk-[hash]',
  legalComments: 'linked',
  logLevel: 'info',
});
for (const file of ['index.html', 'style.css']) copyFileSync(join(here, 'src', file), join(out, file));
