// Embed texts with node-llama-cpp the way qmd 2.8.3 does (one text per getEmbeddingFor call, one
// embedding context, CPU), for bench/kernels.py: the peer's side of the same-run comparison.
//
//   node bench/qmd_embed.mjs JOB.json     (NODE_PATH-free: JOB.modules names qmd's node_modules folder)
//
// JOB: {"modules": ".../app/node_modules", "model": "x.gguf", "threads": 2, "context_size": 2048,
//       "texts": ["...", ...], "passes": 1}
// Prints one JSON line: {"load_s", "pass_s": [...], "cpu_s": [...], "tokens", "texts", "system_info", "head": first vector's
// first 8 values}. The texts are already formatted with the model's prompt (same strings as fanout's side).
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import path from "node:path";

const job = JSON.parse(readFileSync(process.argv[2], "utf8"));
const entry = path.join(job.modules, "node-llama-cpp", "dist", "index.js");
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(entry).href);

const t0 = performance.now();
// qmd's CPU settings: prebuilt binaries only (the variant is picked at run time), threads capped
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error,
                               progressLogs: false, skipDownload: true, maxThreads: job.threads });
const model = await llama.loadModel({ modelPath: job.model, gpuLayers: 0 });
const ctx = await model.createEmbeddingContext({ contextSize: job.context_size, threads: job.threads });
const loadS = (performance.now() - t0) / 1000;

let tokens = 0;
for (const t of job.texts) tokens += model.tokenize(t).length;
const passS = [];
const cpuS = [];
let head = null;
for (let p = 0; p < (job.passes || 1); p++) {
  const s = performance.now();
  const c = process.cpuUsage();
  for (const t of job.texts) {
    const e = await ctx.getEmbeddingFor(t);
    if (head === null) head = Array.from(e.vector.slice(0, 8));
  }
  passS.push((performance.now() - s) / 1000);
  const d = process.cpuUsage(c);
  cpuS.push((d.user + d.system) / 1e6);
}
console.log(JSON.stringify({ load_s: loadS, pass_s: passS, cpu_s: cpuS, tokens, texts: job.texts.length,
                             system_info: llama.systemInfo, head }));
await ctx.dispose();
await model.dispose();
await llama.dispose();
