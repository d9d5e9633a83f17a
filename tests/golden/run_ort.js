#!/usr/bin/env node
// Runs an ONNX model with ONNX Runtime's CPU backend (npm onnxruntime-node, pinned in
// package.json) and writes its outputs, for tests/golden/ort_golden_test.cc.
//
//   node run_ort.js MODEL IN_DIR OUT_DIR
//
// Interchange (no protobuf library needed on either side): IN_DIR/manifest.json is
//   {"tensors": [{"name": "x", "dtype": "float32", "shape": [2, 784], "file": "x.bin"}, ...]}
// with each file holding the tensor's elements as raw little-endian bytes in row-major order
// (bool as one byte per element). OUT_DIR receives the model's outputs in the same form, in the
// model's output order. Exit status 0 on success; 1 with one line on stderr otherwise.
'use strict';

const fs = require('fs');
const path = require('path');

// dtype name -> [TypedArray constructor, bytes per element]; names as ottr's DTypeName and ORT.
const kTypes = {
  float32: [Float32Array, 4],
  float64: [Float64Array, 8],
  int8: [Int8Array, 1],
  uint8: [Uint8Array, 1],
  int16: [Int16Array, 2],
  uint16: [Uint16Array, 2],
  int32: [Int32Array, 4],
  uint32: [Uint32Array, 4],
  int64: [BigInt64Array, 8],
  uint64: [BigUint64Array, 8],
  bool: [Uint8Array, 1],
};

function fail(msg) {
  process.stderr.write(`run_ort.js: error: ${msg}\n`);
  process.exit(1);
}

function readTensor(ort, dir, entry) {
  const type = kTypes[entry.dtype];
  if (!type) fail(`${entry.name}: unsupported dtype ${entry.dtype}`);
  const [Ctor, size] = type;
  const bytes = fs.readFileSync(path.join(dir, entry.file));
  const count = entry.shape.reduce((a, b) => a * b, 1);
  if (bytes.length !== count * size) {
    fail(`${entry.file}: ${bytes.length} bytes, shape [${entry.shape}] of ${entry.dtype} needs ` +
         `${count * size}`);
  }
  // Copy into a fresh, aligned buffer (a Buffer may sit at any offset of a shared pool).
  const data = new Ctor(count);
  new Uint8Array(data.buffer).set(bytes);
  return new ort.Tensor(entry.dtype, entry.dtype === 'bool' ? Uint8Array.from(data) : data,
                        entry.shape);
}

async function main() {
  const [modelPath, inDir, outDir] = process.argv.slice(2);
  if (!outDir) fail('usage: node run_ort.js MODEL IN_DIR OUT_DIR');
  let ort;
  try {
    ort = require('onnxruntime-node');
  } catch (e) {
    fail(`cannot load onnxruntime-node (${e.message}); run scripts/install-deps.sh`);
  }
  const manifest = JSON.parse(fs.readFileSync(path.join(inDir, 'manifest.json'), 'utf8'));
  const feeds = {};
  for (const entry of manifest.tensors) feeds[entry.name] = readTensor(ort, inDir, entry);

  // Plain CPU execution without graph rewrites that change rounding (e.g. fused GELU
  // approximations): the golden is the straightforward evaluation of the model.
  const session = await ort.InferenceSession.create(modelPath, {
    executionProviders: ['cpu'],
    graphOptimizationLevel: 'disabled',
    intraOpNumThreads: 1,
    interOpNumThreads: 1,
  });
  const results = await session.run(feeds);
  fs.mkdirSync(outDir, {recursive: true});
  const out = {tensors: []};
  session.outputNames.forEach((name, k) => {
    const t = results[name];
    if (!kTypes[t.type]) fail(`output ${name}: unsupported dtype ${t.type}`);
    const file = `output_${k}.bin`;
    const view = t.data;
    fs.writeFileSync(path.join(outDir, file),
                     Buffer.from(view.buffer, view.byteOffset, view.byteLength));
    out.tensors.push({name, dtype: t.type, shape: t.dims.map(Number), file});
  });
  fs.writeFileSync(path.join(outDir, 'manifest.json'), JSON.stringify(out, null, 1) + '\n');
}

main().catch((e) => fail(e && e.message ? e.message.split('\n')[0] : String(e)));
