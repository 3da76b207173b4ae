// The TypeScript declarations (src/index.d.ts) compile with a program that
// uses the API as docs/node.md does (test/types-check.ts), under strict mode.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

const root = fileURLToPath(new URL("..", import.meta.url));

test("the TypeScript declarations type-check a program using the API", () => {
  const tsc = fileURLToPath(new URL("../node_modules/typescript/bin/tsc", import.meta.url));
  let out = "";
  try {
    execFileSync(process.execPath, [tsc, "--noEmit", "--strict", "--module", "nodenext", "--moduleResolution", "nodenext",
      "--target", "es2022", "--types", "node", "test/types-check.ts"], { cwd: root, encoding: "utf8" });
  } catch (e) {
    out = `${e.stdout}${e.stderr}`;
  }
  assert.equal(out, "");
});
