// tests/cluster/cel/eval.mjs: the test API server's CEL evaluator, a child
// process of tests/cluster/kubeapi/cel.py. Evaluates CRD validation rules
// with @bufbuild/cel (Buf's conformance-tested CEL for JavaScript); it only
// parses requests and formats answers, the language is the library's.
//
// Protocol: one JSON request per line on stdin, one JSON answer per line on
// stdout.
//   {"op":"compile","rule":"self.x > 0"}        -> {"error": null | "<message>"}
//   {"op":"eval","items":[{"rule":..., "self":V, "oldSelf":V?, "messageExpression":...?}]}
//                                                -> {"results":[{"value":true|false|...} | {"error":"..."}]}
// Values: {"$int":"12"} is a CEL int, a JSON number a double, {"$map":{...}}
// a map (has() tests its keys), arrays lists, strings, booleans, null.
// Error texts are cel-go's where the API server shows them ("no such key: x",
// "division by zero", "modulus by zero", "no such overload").
import { createInterface } from "node:readline";
import { parse, plan, celEnv, isCelError } from "@bufbuild/cel";
import { strings } from "@bufbuild/cel/ext";

const env = celEnv({ funcs: strings });
const plans = new Map();

function program(text) {
  let p = plans.get(text);
  if (p === undefined) {
    p = plan(env, parse(text));
    plans.set(text, p);
  }
  return p;
}

function decode(v) {
  if (Array.isArray(v)) return v.map(decode);
  if (v !== null && typeof v === "object") {
    if ("$int" in v) return BigInt(v.$int);
    const m = new Map();
    for (const [k, x] of Object.entries(v.$map ?? {})) m.set(k, decode(x));
    return m;
  }
  return v;
}

// cel-go's wording for the errors kube-apiserver reports.
function wording(err) {
  const text = String(err && err.message ? err.message : err);
  const key = /(?:no such key|field not found):?\s*(.*)/i.exec(text);
  if (key) return "no such key: " + key[1].replace(/^["']|["']$/g, "");
  if (/modulus by zero|modulo by zero|remainder by zero/i.test(text)) return "modulus by zero";
  if (/division by zero|divide by zero/i.test(text)) return "division by zero";
  if (/overflow/i.test(text)) return "integer overflow";
  if (/no such overload|no matching overload|unbound function|unsupported/i.test(text)) return "no such overload";
  return text;
}

function evaluate(item) {
  try {
    const vars = { self: decode(item.self) };
    if ("oldSelf" in item) vars.oldSelf = decode(item.oldSelf);
    const value = program(item.rule)(vars);
    if (isCelError(value)) return { error: wording(value) };
    const out = { value: typeof value === "boolean" ? value : String(value) };
    if (value === false && item.messageExpression) {
      const m = program(item.messageExpression)(vars);
      if (!isCelError(m) && typeof m === "string" && m.trim() !== "") out.message = m;
    }
    return out;
  } catch (err) {
    return { error: wording(err) };
  }
}

function handle(req) {
  if (req.op === "compile") {
    try {
      parse(req.rule);
      return { error: null };
    } catch (err) {
      // cel-go prints parse errors as "ERROR: <input>:line:col: ..."
      return { error: "ERROR: " + String(err && err.message ? err.message : err) };
    }
  }
  if (req.op === "eval") return { results: req.items.map(evaluate) };
  return { error: "unknown op " + req.op };
}

const rl = createInterface({ input: process.stdin });
rl.on("line", (line) => {
  let answer;
  try {
    answer = handle(JSON.parse(line));
  } catch (err) {
    answer = { error: "bad request: " + String(err) };
  }
  process.stdout.write(JSON.stringify(answer) + "\n");
});
