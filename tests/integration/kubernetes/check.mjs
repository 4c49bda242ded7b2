// Checks for tests/integration/kubernetes_manifests.sh, run with the packages of package.json
// (installed by the test with `npm ci`, pinned by package-lock.json). Subcommands:
//
//   validate FILE...          every YAML document against its kind's schema, strictly:
//                             - kubernetes-types 1.30.0 (the Kubernetes 1.30 OpenAPI definitions
//                               as TypeScript) through the TypeScript compiler: an unknown field
//                               is an error (excess property check), so are a wrong type and a
//                               missing required field;
//                             - kubernetes-models (JSON Schema from the OpenAPI spec, compiled
//                               with Ajv): types, formats, enums and patterns where the spec has
//                               them; ServiceMonitor: @kubernetes-models/prometheus-operator,
//                               the prometheus-operator API, both ways.
//   compare PLAIN... -- RENDERED   the chart's objects equal the plain manifests' (by kind and
//                             name, less the Namespace and the chart's own labels)
//   values SCHEMA VALUES...   values files against values.schema.json (Ajv, draft-07), and the
//                             schema closes every object (additionalProperties)
//   refs CHART                every .Values.a.b of the templates exists in values.yaml
//   policy UNIT FILE...       what the manifests promise: the agent's capabilities are the
//                             systemd unit's, token files are never world-readable and are
//                             mounted as regular files (subPath), host paths are read-only but
//                             the data directory, nothing privileged
//   args FILE...              the ithbat containers' args, as JSON lines {object,container,args,env}
//
// Exit status 1 with one line per problem on stderr; YAML is read as Kubernetes reads it
// (YAML 1.1: 0400 is octal, as in a Secret's defaultMode).
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import YAML from "yaml";
import ts from "typescript";

const require = createRequire(import.meta.url);
const problems = [];
const problem = (msg) => problems.push(msg);

function finish(okMessage) {
  if (problems.length) {
    for (const p of problems) console.error(`FAIL: ${p}`);
    process.exit(1);
  }
  if (okMessage) console.log(okMessage);
}

// ---- YAML ------------------------------------------------------------------------------------

function readDocs(file) {
  const text = fs.readFileSync(file, "utf8");
  const docs = YAML.parseAllDocuments(text, { version: "1.1", uniqueKeys: true, prettyErrors: true });
  const out = [];
  docs.forEach((doc, i) => {
    for (const e of [...doc.errors, ...doc.warnings]) problem(`${file}: document ${i + 1}: YAML: ${e.message}`);
    const value = doc.toJS({ maxAliasCount: 0 });
    if (value === null || value === undefined) return; // an empty document (a trailing ---)
    out.push({ file, index: i + 1, obj: value });
  });
  return out;
}

const describe = (d) => `${d.file}: ${d.obj?.kind ?? "?"}/${d.obj?.metadata?.name ?? "?"}`;

// ---- validate --------------------------------------------------------------------------------

// apiVersion/kind -> [TypeScript type, kubernetes-models module, class]
const KINDS = {
  "v1/Namespace": ["core.Namespace", "kubernetes-models/v1/Namespace", "Namespace"],
  "v1/ServiceAccount": ["core.ServiceAccount", "kubernetes-models/v1/ServiceAccount", "ServiceAccount"],
  "v1/Service": ["core.Service", "kubernetes-models/v1/Service", "Service"],
  "v1/Secret": ["core.Secret", "kubernetes-models/v1/Secret", "Secret"],
  "v1/ConfigMap": ["core.ConfigMap", "kubernetes-models/v1/ConfigMap", "ConfigMap"],
  "apps/v1/DaemonSet": ["apps.DaemonSet", "kubernetes-models/apps/v1/DaemonSet", "DaemonSet"],
  "apps/v1/Deployment": ["apps.Deployment", "kubernetes-models/apps/v1/Deployment", "Deployment"],
  "monitoring.coreos.com/v1/ServiceMonitor": [
    "IServiceMonitor",
    "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor",
    "ServiceMonitor",
  ],
};

// Writes VALUE as a TypeScript expression, one property or element per line, and records the
// JSON path of each line so that a compiler message can say where in the manifest it is.
function emitLiteral(value, pathText, indent, lines, paths, prefix, suffix) {
  const pad = "  ".repeat(indent);
  if (Array.isArray(value)) {
    if (value.length === 0) {
      lines.push(`${pad}${prefix}[]${suffix}`);
      paths.push(pathText);
      return;
    }
    lines.push(`${pad}${prefix}[`);
    paths.push(pathText);
    value.forEach((v, i) => emitLiteral(v, `${pathText}[${i}]`, indent + 1, lines, paths, "", ","));
    lines.push(`${pad}]${suffix}`);
    paths.push(pathText);
  } else if (value !== null && typeof value === "object") {
    const keys = Object.keys(value);
    if (keys.length === 0) {
      lines.push(`${pad}${prefix}{}${suffix}`);
      paths.push(pathText);
      return;
    }
    lines.push(`${pad}${prefix}{`);
    paths.push(pathText);
    for (const k of keys) {
      emitLiteral(value[k], `${pathText}.${k}`, indent + 1, lines, paths, `${JSON.stringify(k)}: `, ",");
    }
    lines.push(`${pad}}${suffix}`);
    paths.push(pathText);
  } else {
    lines.push(`${pad}${prefix}${JSON.stringify(value)}${suffix}`);
    paths.push(pathText);
  }
}

function typeCheck(docs) {
  const lines = [
    'import type * as core from "kubernetes-types/core/v1";',
    'import type * as apps from "kubernetes-types/apps/v1";',
    'import type { IServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";',
  ];
  const paths = lines.map(() => "");
  const owner = lines.map(() => null);
  docs.forEach((d, i) => {
    const entry = KINDS[`${d.obj.apiVersion}/${d.obj.kind}`];
    if (!entry) return;
    const before = lines.length;
    emitLiteral(d.obj, "", 0, lines, paths, `export const doc${i}: ${entry[0]} = `, ";");
    for (let l = before; l < lines.length; l++) owner[l] = d;
  });
  // A file that does not exist, next to this script: imports resolve from its node_modules.
  const fileName = path.join(path.dirname(new URL(import.meta.url).pathname), "manifests.ts");
  const source = lines.join("\n") + "\n";
  const options = {
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    types: [],
    lib: ["lib.es2022.d.ts"],
  };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile;
  host.getSourceFile = (name, lang, ...rest) =>
    path.resolve(name) === fileName ? ts.createSourceFile(name, source, lang) : getSourceFile(name, lang, ...rest);
  const fileExists = host.fileExists;
  host.fileExists = (name) => path.resolve(name) === fileName || fileExists(name);
  const program = ts.createProgram([fileName], options, host);
  const diagnostics = [...program.getSyntacticDiagnostics(), ...program.getSemanticDiagnostics()];
  for (const diag of diagnostics) {
    const text = ts.flattenDiagnosticMessageText(diag.messageText, " ");
    if (!diag.file || path.resolve(diag.file.fileName) !== fileName) {
      problem(`TypeScript: ${text}`);
      continue;
    }
    const { line } = diag.file.getLineAndCharacterOfPosition(diag.start ?? 0);
    const d = owner[line];
    const api = d?.obj.kind === "ServiceMonitor" ? "prometheus-operator API types" : "Kubernetes 1.30 API types";
    problem(`${d ? describe(d) : "?"}: ${paths[line] || "(the object)"}: ${text} [${api}, strict]`);
  }
}

async function modelCheck(docs) {
  for (const d of docs) {
    const entry = KINDS[`${d.obj.apiVersion}/${d.obj.kind}`];
    if (!entry) continue;
    const mod = await import(entry[1]);
    try {
      new mod[entry[2]](structuredClone(d.obj)).validate();
    } catch (e) {
      const details = (e.errors ?? []).map((x) => `${x.instancePath || "/"} ${x.message}`).join("; ");
      problem(`${describe(d)}: ${details || e.message} [${entry[1].split("/").slice(0, -2).join("/")} JSON Schema]`);
    }
  }
}

async function validate(files) {
  const docs = files.flatMap(readDocs);
  for (const d of docs) {
    if (typeof d.obj !== "object" || Array.isArray(d.obj)) {
      problem(`${d.file}: document ${d.index} is not an object`);
      continue;
    }
    if (!KINDS[`${d.obj.apiVersion}/${d.obj.kind}`]) {
      problem(`${describe(d)}: no schema for ${d.obj.apiVersion} ${d.obj.kind} here (add it to KINDS in check.mjs)`);
    }
    if (!d.obj.metadata?.name) problem(`${describe(d)}: no metadata.name`);
    if (d.obj.kind !== "Namespace" && !d.obj.metadata?.namespace) problem(`${describe(d)}: no metadata.namespace`);
  }
  typeCheck(docs);
  await modelCheck(docs);
  const counts = {};
  for (const d of docs) counts[d.obj.kind] = (counts[d.obj.kind] ?? 0) + 1;
  finish(
    `valid: ${docs.length} objects (${Object.entries(counts)
      .map(([k, n]) => `${n} ${k}`)
      .join(", ")}) in ${files.length} files`,
  );
}

// ---- compare ---------------------------------------------------------------------------------

const CHART_LABELS = ["helm.sh/chart", "app.kubernetes.io/managed-by"];

function normalise(obj) {
  const o = structuredClone(obj);
  const labels = o.metadata?.labels;
  if (labels) for (const l of CHART_LABELS) delete labels[l];
  return o;
}

function diff(a, b, where, out) {
  if (out.length >= 20) return;
  if (typeof a !== typeof b || Array.isArray(a) !== Array.isArray(b) || (a === null) !== (b === null)) {
    out.push(`${where || "/"}: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`);
  } else if (Array.isArray(a)) {
    if (a.length !== b.length) out.push(`${where}: ${a.length} items vs ${b.length}`);
    for (let i = 0; i < Math.min(a.length, b.length); i++) diff(a[i], b[i], `${where}[${i}]`, out);
  } else if (a && typeof a === "object") {
    for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) {
      if (!(k in a)) out.push(`${where}.${k}: only in the chart (${JSON.stringify(b[k])})`);
      else if (!(k in b)) out.push(`${where}.${k}: only in the plain manifest (${JSON.stringify(a[k])})`);
      else diff(a[k], b[k], `${where}.${k}`, out);
    }
  } else if (a !== b) {
    out.push(`${where}: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`);
  }
}

function compare(plainFiles, renderedFile) {
  const key = (o) => `${o.kind}/${o.metadata?.namespace ?? ""}/${o.metadata?.name}`;
  const plain = new Map(
    plainFiles
      .flatMap(readDocs)
      .filter((d) => d.obj.kind !== "Namespace")
      .map((d) => [key(d.obj), d.obj]),
  );
  const rendered = new Map(readDocs(renderedFile).map((d) => [key(d.obj), d.obj]));
  for (const k of plain.keys()) if (!rendered.has(k)) problem(`${k}: in the plain manifests, not rendered by the chart`);
  for (const k of rendered.keys()) if (!plain.has(k)) problem(`${k}: rendered by the chart, not in the plain manifests`);
  for (const [k, p] of plain) {
    if (!rendered.has(k)) continue;
    const out = [];
    diff(normalise(p), normalise(rendered.get(k)), "", out);
    for (const d of out) problem(`${k}: plain vs chart differ at ${d}`);
  }
  finish(`same objects: ${plain.size} in the plain manifests and the chart (${[...plain.keys()].join(", ")})`);
}

// ---- values ----------------------------------------------------------------------------------

function closedSchema(schema, where) {
  if (!schema || typeof schema !== "object") return;
  if (schema.type === "object" || schema.properties) {
    if (schema.properties && schema.additionalProperties !== false) {
      problem(`values.schema.json: ${where || "/"} lists properties but does not set additionalProperties: false`);
    }
    if (!schema.properties && schema.additionalProperties === undefined) {
      problem(`values.schema.json: ${where || "/"} is an object with neither properties nor additionalProperties`);
    }
  }
  for (const [k, v] of Object.entries(schema.properties ?? {})) closedSchema(v, `${where}.${k}`);
  for (const [k, v] of Object.entries(schema.definitions ?? {})) closedSchema(v, `#/definitions/${k}`);
  if (schema.items) closedSchema(schema.items, `${where}[]`);
}

function values(schemaFile, valueFiles) {
  const Ajv = require("ajv");
  const addFormats = require("ajv-formats");
  const schema = JSON.parse(fs.readFileSync(schemaFile, "utf8"));
  closedSchema(schema, "");
  const ajv = new Ajv({ allErrors: true, strict: true, strictTypes: false });
  addFormats(ajv);
  const check = ajv.compile(schema);
  for (const f of valueFiles) {
    const docs = readDocs(f);
    if (docs.length !== 1) {
      problem(`${f}: ${docs.length} YAML documents, expected one`);
      continue;
    }
    let v = docs[0].obj;
    // A ci/ file holds overrides: check them merged over values.yaml, as Helm does.
    if (path.basename(f) !== "values.yaml") v = merge(readDocs(path.join(path.dirname(schemaFile), "values.yaml"))[0].obj, v);
    if (!check(v)) {
      for (const e of check.errors) problem(`${f}: ${e.instancePath || "/"} ${e.message} (${JSON.stringify(e.params)})`);
    }
  }
  finish(`values: ${valueFiles.length} file(s) valid against ${path.basename(schemaFile)}, every object in it closed`);
}

function merge(base, over) {
  if (!over || typeof over !== "object" || Array.isArray(over) || !base || typeof base !== "object") return over;
  const out = { ...base };
  for (const [k, v] of Object.entries(over)) out[k] = k in base ? merge(base[k], v) : v;
  return out;
}

// ---- refs ------------------------------------------------------------------------------------

function refs(chart) {
  const vals = readDocs(path.join(chart, "values.yaml"))[0].obj;
  const dir = path.join(chart, "templates");
  let count = 0;
  for (const name of fs.readdirSync(dir).sort()) {
    const text = fs.readFileSync(path.join(dir, name), "utf8");
    // $a := .Values.agent style aliases, then $a.x.y and .Values.x.y references.
    const aliases = {};
    for (const m of text.matchAll(/\$([A-Za-z]\w*)\s*:=\s*\.Values((?:\.[A-Za-z]\w*)+)/g)) aliases[m[1]] = m[2].slice(1);
    const found = [];
    for (const m of text.matchAll(/\.Values((?:\.[A-Za-z]\w*)+)/g)) found.push(m[1].slice(1));
    for (const m of text.matchAll(/\$([A-Za-z]\w*)((?:\.[A-Za-z]\w*)+)/g)) {
      if (aliases[m[1]]) found.push(`${aliases[m[1]]}${m[2]}`);
    }
    for (const ref of found) {
      count++;
      let v = vals;
      for (const part of ref.split(".")) {
        if (v === null || typeof v !== "object" || !(part in v)) {
          problem(`${name}: .Values.${ref} is not in values.yaml (a typo renders as nothing)`);
          break;
        }
        v = v[part];
      }
    }
  }
  finish(`refs: ${count} .Values references in the templates, all in values.yaml`);
}

// ---- policy ----------------------------------------------------------------------------------

function podSpecs(docs) {
  return docs
    .filter((d) => ["DaemonSet", "Deployment"].includes(d.obj.kind))
    .map((d) => ({ d, spec: d.obj.spec.template.spec }));
}

function policy(unitFile, files) {
  const unit = fs.readFileSync(unitFile, "utf8");
  const m = unit.match(/^CapabilityBoundingSet=(.*)$/m);
  if (!m) problem(`${unitFile}: no CapabilityBoundingSet=`);
  const unitCaps = new Set((m?.[1] ?? "").trim().split(/\s+/).map((c) => c.replace(/^CAP_/, "")));
  const docs = files.flatMap(readDocs);
  let agents = 0;
  for (const { d, spec } of podSpecs(docs)) {
    const volumes = new Map((spec.volumes ?? []).map((v) => [v.name, v]));
    for (const c of spec.containers) {
      const sc = c.securityContext ?? {};
      const isAgent = c.args?.[0] === "agent";
      if (sc.privileged) problem(`${describe(d)}: container ${c.name} is privileged`);
      if (sc.readOnlyRootFilesystem !== true) problem(`${describe(d)}: container ${c.name}: root file system not read-only`);
      if (!(sc.capabilities?.drop ?? []).includes("ALL")) problem(`${describe(d)}: container ${c.name} does not drop ALL capabilities`);
      if (isAgent) {
        agents++;
        const added = new Set(sc.capabilities?.add ?? []);
        const missing = [...unitCaps].filter((c) => !added.has(c));
        const extra = [...added].filter((c) => !unitCaps.has(c));
        if (missing.length || extra.length) {
          problem(
            `${describe(d)}: capabilities differ from ${path.basename(unitFile)}'s CapabilityBoundingSet` +
              `${missing.length ? `; missing ${missing.join(",")}` : ""}${extra.length ? `; extra ${extra.join(",")}` : ""}`,
          );
        }
        if (!spec.hostPID) problem(`${describe(d)}: the agent needs hostPID: true (the jobs' processes)`);
      } else if ((sc.capabilities?.add ?? []).length) {
        problem(`${describe(d)}: container ${c.name} adds capabilities`);
      }
      for (const vm of c.volumeMounts ?? []) {
        const v = volumes.get(vm.name);
        if (!v) {
          problem(`${describe(d)}: mount ${vm.mountPath} names no volume ${vm.name}`);
          continue;
        }
        if (v.hostPath && vm.mountPath !== "/var/lib/ithbat" && vm.readOnly !== true) {
          problem(`${describe(d)}: host path ${v.hostPath.path} is mounted writable at ${vm.mountPath}`);
        }
        if (v.secret) {
          // The agent and hub open token files with O_NOFOLLOW: a Secret volume's keys are
          // symbolic links, a subPath mount is the file itself.
          if (!vm.subPath) problem(`${describe(d)}: secret ${v.secret.secretName} mounted at ${vm.mountPath} without subPath (a symlink: refused)`);
          const modes = [v.secret.defaultMode ?? 0o644, ...(v.secret.items ?? []).map((i) => i.mode).filter((x) => x !== undefined)];
          for (const mode of modes) {
            if (mode & 0o007) problem(`${describe(d)}: secret ${v.secret.secretName} mode ${mode.toString(8)} lets other users read it (the agent refuses it)`);
          }
        }
      }
      // Every $(VAR) in the args is an env var of the container (else Kubernetes passes it as is).
      const env = new Set((c.env ?? []).map((e) => e.name));
      for (const a of c.args ?? []) {
        for (const v of a.matchAll(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g)) {
          if (!env.has(v[1])) problem(`${describe(d)}: arg ${a} names $(${v[1]}), which is not in env`);
        }
      }
    }
  }
  if (agents === 0) problem(`no agent container in ${files.join(" ")}`);
  finish(`policy: ${agents} agent container(s) with the unit's capabilities (${[...unitCaps].join(" ")}); tokens never world-readable, mounted as files; host paths read-only`);
}

// ---- args ------------------------------------------------------------------------------------

function args(files) {
  for (const { d, spec } of podSpecs(files.flatMap(readDocs))) {
    for (const c of spec.containers) {
      if (!["agent", "hub"].includes(c.args?.[0])) continue;
      const env = {};
      for (const e of c.env ?? []) env[e.name] = e.value ?? (e.valueFrom ? "<downward>" : "");
      console.log(JSON.stringify({ object: describe(d), container: c.name, args: c.args, env }));
    }
  }
  finish();
}

// ---- main ------------------------------------------------------------------------------------

const [cmd, ...rest] = process.argv.slice(2);
switch (cmd) {
  case "validate":
    await validate(rest);
    break;
  case "compare": {
    const sep = rest.indexOf("--");
    compare(rest.slice(0, sep), rest[sep + 1]);
    break;
  }
  case "values":
    values(rest[0], rest.slice(1));
    break;
  case "refs":
    refs(rest[0]);
    break;
  case "policy":
    policy(rest[0], rest.slice(1));
    break;
  case "args":
    args(rest);
    break;
  default:
    console.error("usage: check.mjs validate|compare|values|refs|policy|args ...");
    process.exit(2);
}
