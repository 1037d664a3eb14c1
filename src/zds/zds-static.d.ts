import * as $protobuf from "protobufjs";
import Long = require("long");

export namespace istio {

    namespace workload {

        namespace zds {

            enum Version {
                NOT_USED = 0,
                V1 = 1
            }

            interface IZdsHello extends istio.workload.zds.ZdsHello.$Properties {
            }

            class ZdsHello {
                constructor(properties?: istio.workload.zds.ZdsHello.$Properties);
                $unknowns?: Uint8Array[];
                version: istio.workload.zds.Version;
                static encode(message: istio.workload.zds.ZdsHello.$Properties, writer?: $protobuf.Writer): $protobuf.Writer;
                static decode(reader: ($protobuf.Reader|Uint8Array), length?: number): istio.workload.zds.ZdsHello & istio.workload.zds.ZdsHello.$Shape;
            }

            namespace ZdsHello {
                interface $Properties {
                    version?: (istio.workload.zds.Version|null);
                    $unknowns?: Uint8Array[];
                }
                type $Shape = istio.workload.zds.ZdsHello.$Properties;
            }

            interface IWorkloadInfo extends istio.workload.zds.WorkloadInfo.$Properties {
            }

            class WorkloadInfo {
                constructor(properties?: istio.workload.zds.WorkloadInfo.$Properties);
                $unknowns?: Uint8Array[];
                name: string;
                namespace: string;
                serviceAccount: string;
                static encode(message: istio.workload.zds.WorkloadInfo.$Properties, writer?: $protobuf.Writer): $protobuf.Writer;
                static decode(reader: ($protobuf.Reader|Uint8Array), length?: number): istio.workload.zds.WorkloadInfo & istio.workload.zds.WorkloadInfo.$Shape;
            }

            namespace WorkloadInfo {
                interface $Properties {
                    name?: (string|null);
                    namespace?: (string|null);
                    serviceAccount?: (string|null);
                    $unknowns?: Uint8Array[];
                }
                type $Shape = istio.workload.zds.WorkloadInfo.$Properties;
            }

            interface IAddWorkload extends istio.workload.zds.AddWorkload.$Properties {
            }

            class AddWorkload {
                constructor(properties?: istio.workload.zds.AddWorkload.$Properties);
                $unknowns?: Uint8Array[];
                uid: string;
                workloadInfo?: (istio.workload.zds.WorkloadInfo.$Properties|null);
                static encode(message: istio.workload.zds.AddWorkload.$Properties, writer?: $protobuf.Writer): $protobuf.Writer;
                static decode(reader: ($protobuf.Reader|Uint8Array), length?: number): istio.workload.zds.AddWorkload & istio.workload.zds.AddWorkload.$Shape;
            }

            namespace AddWorkload {
                interface $Properties {
                    uid?: (string|null);
                    workloadInfo?: (istio.workload.zds.WorkloadInfo.$Properties|null);
                    $unknowns?: Uint8Array[];
                }
                type $Shape = istio.workload.zds.AddWorkload.$Properties;
            }

            interface IKeepWorkload extends istio.workload.zds.KeepWorkload.$Properties {
            }

            class KeepWorkload {
                constructor(properties?: istio.workload.zds.KeepWorkload.$Properties);
                $unknowns?: Uint8Array[];
                uid: string;
                static encode(message: istio.workload.zds.KeepWorkload.$Properties, writer?: $protobuf.Writer): $protobuf.Writer;
                static decode(reader: ($protobuf.Reader|Uint8Array), length?: number): istio.workload.zds.KeepWorkload & istio.workload.zds.KeepWorkload.$Shape;
            }

            namespace KeepWorkload {
                interface $Properties {
                    uid?: (string|null);
                    $unknowns?: Uint8Array[];
                }
                type $Shape = istio.workload.zds.KeepWorkload.$Properties;
            }

            interface IDelWorkload extends istio.workload.zds.DelWorkload.$Properties {
            }

            class DelWorkload {
                constructor(properties?: istio.workload.zds.DelWorkload.$Properties);
                $unknowns?: Uint8Array[];
                uid: string;
                static encode(message: istio.workload.zds.DelWorkload.$Properties, writer?: $protobuf.Writer): $protobuf.Writer;
                static decode(reader: ($protobuf.Reader|Uint8Array), length?: number): istio.workload.zds.DelWorkload & istio.workload.zds.DelWorkload.$Shape;
            }

            namespace DelWorkload {
                interface $Properties {
                    uid?: (string|null);
                    $unknowns?: Uint8Array[];
                }
                type $Shape = istio.workload.zds.DelWorkload.$Properties;
            }

            interface ISnapshotSent extends istio.workload.zds.SnapshotSent.$Properties {
            }

            class SnapshotSent {
                constructor(properties?: istio.workload.zds.SnapshotSent.$Properties);
                $unknowns?: Uint8Array[];
                static encode(message: istio.workload.zds.SnapshotSent.$Properties, writer?: $protobuf.Writer): $protobuf.Writer;
                static decode(reader: ($protobuf.Reader|Uint8Array), length?: number): istio.workload.zds.SnapshotSent & istio.workload.zds.SnapshotSent.$Shape;
            }

            namespace SnapshotSent {
                interface $Properties {
                    $unknowns?: Uint8Array[];
                }
                type $Shape = istio.workload.zds.SnapshotSent.$Properties;
            }

            interface IWorkloadRequest extends istio.workload.zds.WorkloadRequest.$Properties {
            }

            class WorkloadRequest {
                constructor(properties?: istio.workload.zds.WorkloadRequest.$Properties);
                $unknowns?: Uint8Array[];
                add?: (istio.workload.zds.AddWorkload.$Properties|null);
                del?: (istio.workload.zds.DelWorkload.$Properties|null);
                snapshotSent?: (istio.workload.zds.SnapshotSent.$Properties|null);
                keep?: (istio.workload.zds.KeepWorkload.$Properties|null);
                payload?: ("add"|"del"|"snapshotSent"|"keep");
                static encode(message: istio.workload.zds.WorkloadRequest.$Properties, writer?: $protobuf.Writer): $protobuf.Writer;
                static decode(reader: ($protobuf.Reader|Uint8Array), length?: number): istio.workload.zds.WorkloadRequest & istio.workload.zds.WorkloadRequest.$Shape;
            }

            namespace WorkloadRequest {
                interface $Properties {
                    add?: (istio.workload.zds.AddWorkload.$Properties|null);
                    del?: (istio.workload.zds.DelWorkload.$Properties|null);
                    snapshotSent?: (istio.workload.zds.SnapshotSent.$Properties|null);
                    keep?: (istio.workload.zds.KeepWorkload.$Properties|null);
                    payload?: ("add"|"del"|"snapshotSent"|"keep");
                    $unknowns?: Uint8Array[];
                }
                type $Shape = {
                  add?: istio.workload.zds.AddWorkload.$Shape|null;
                  del?: istio.workload.zds.DelWorkload.$Shape|null;
                  snapshotSent?: istio.workload.zds.SnapshotSent.$Shape|null;
                  keep?: istio.workload.zds.KeepWorkload.$Shape|null;
                  $unknowns?: Uint8Array[];
                } & (
                  ({ payload?: undefined; add?: null; del?: null; snapshotSent?: null; keep?: null }|{ payload?: "add"; add: istio.workload.zds.AddWorkload.$Shape; del?: null; snapshotSent?: null; keep?: null }|{ payload?: "del"; add?: null; del: istio.workload.zds.DelWorkload.$Shape; snapshotSent?: null; keep?: null }|{ payload?: "snapshotSent"; add?: null; del?: null; snapshotSent: istio.workload.zds.SnapshotSent.$Shape; keep?: null }|{ payload?: "keep"; add?: null; del?: null; snapshotSent?: null; keep: istio.workload.zds.KeepWorkload.$Shape })
                );
            }

            interface IAck extends istio.workload.zds.Ack.$Properties {
            }

            class Ack {
                constructor(properties?: istio.workload.zds.Ack.$Properties);
                $unknowns?: Uint8Array[];
                error: string;
                static encode(message: istio.workload.zds.Ack.$Properties, writer?: $protobuf.Writer): $protobuf.Writer;
                static decode(reader: ($protobuf.Reader|Uint8Array), length?: number): istio.workload.zds.Ack & istio.workload.zds.Ack.$Shape;
            }

            namespace Ack {
                interface $Properties {
                    error?: (string|null);
                    $unknowns?: Uint8Array[];
                }
                type $Shape = istio.workload.zds.Ack.$Properties;
            }

            interface IWorkloadResponse extends istio.workload.zds.WorkloadResponse.$Properties {
            }

            class WorkloadResponse {
                constructor(properties?: istio.workload.zds.WorkloadResponse.$Properties);
                $unknowns?: Uint8Array[];
                ack?: (istio.workload.zds.Ack.$Properties|null);
                payload?: "ack";
                static encode(message: istio.workload.zds.WorkloadResponse.$Properties, writer?: $protobuf.Writer): $protobuf.Writer;
                static decode(reader: ($protobuf.Reader|Uint8Array), length?: number): istio.workload.zds.WorkloadResponse & istio.workload.zds.WorkloadResponse.$Shape;
            }

            namespace WorkloadResponse {
                interface $Properties {
                    ack?: (istio.workload.zds.Ack.$Properties|null);
                    payload?: "ack";
                    $unknowns?: Uint8Array[];
                }
                type $Shape = {
                  ack?: istio.workload.zds.Ack.$Shape|null;
                  $unknowns?: Uint8Array[];
                } & (
                  ({ payload?: undefined; ack?: null }|{ payload?: "ack"; ack: istio.workload.zds.Ack.$Shape })
                );
            }
        }
    }
}
