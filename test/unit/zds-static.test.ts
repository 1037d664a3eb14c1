// The ZDS codec's two derived artefacts stay equal to zds.proto: the static code protobufjs's
// generator made from it (committed, so the agent's start does not parse the .proto), and the
// field table codec.ts walks for prost's strictness.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import protobuf from 'protobufjs';
import { afterAll, describe, expect, it } from 'vitest';
import { projectRoot } from '../../src/project-root.js';
import { ZDS_FIELDS, type FieldSpec } from '../../src/zds/codec.js';

const zdsDir = join(projectRoot(), 'src', 'zds');
const scratch = mkdtempSync(join(tmpdir(), 'ana-zds-static-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** The table codec.ts should hold, read from zds.proto by protobufjs's reflection. */
function fieldsFromProto(): Record<string, Record<number, FieldSpec>> {
  const pkg = protobuf.loadSync(join(zdsDir, 'zds.proto')).lookup('istio.workload.zds') as protobuf.Namespace;
  const table: Record<string, Record<number, FieldSpec>> = {};
  for (const type of pkg.nestedArray.filter((n): n is protobuf.Type => n instanceof protobuf.Type)) {
    type.resolveAll();
    table[type.name] = Object.fromEntries(
      type.fieldsArray.map((f) => {
        const kind =
          f.resolvedType instanceof protobuf.Type
            ? f.resolvedType.name
            : f.type === 'string'
              ? 'string'
              : f.resolvedType
                ? 'varint'
                : f.type;
        return [f.id, { name: f.name, kind, ...(f.partOf ? { oneof: f.partOf.name } : {}) } as FieldSpec];
      }),
    );
  }
  return table;
}

describe('ZDS codec artefacts derived from src/zds/zds.proto', () => {
  it('src/zds/zds-static.js and .d.ts are what scripts/zds-static.mjs generates now (run it after editing zds.proto)', () => {
    execFileSync(process.execPath, [join(projectRoot(), 'scripts', 'zds-static.mjs'), scratch], { stdio: 'pipe' });
    for (const file of ['zds-static.js', 'zds-static.d.ts']) {
      expect(readFileSync(join(scratch, file), 'utf8'), file).toBe(readFileSync(join(zdsDir, file), 'utf8'));
    }
  }, 60_000);

  it("codec.ts's field table (wire type by field number, nested message, oneof) is zds.proto's", () => {
    const fromProto = fieldsFromProto();
    expect(Object.keys(fromProto).sort()).toEqual(Object.keys(ZDS_FIELDS).sort());
    expect(JSON.parse(JSON.stringify(ZDS_FIELDS))).toEqual(JSON.parse(JSON.stringify(fromProto)));
    // Only these kinds exist in zds.proto; a new one (bytes, a packed field) needs codec.ts's walk changed.
    const kinds = new Set(Object.values(fromProto).flatMap((fields) => Object.values(fields).map((f) => f.kind)));
    expect([...kinds].filter((k) => !(k in fromProto)).sort()).toEqual(['string', 'varint']);
  });
});
