import { describe, expect, it } from 'vitest';
import { loadAgentConfig, OPTIONS, parseGoDurationMs, usage } from '../../src/agent/config.js';
import { UsageError } from '../../src/util/usage-error.js';
import { podsTable } from '../../src/cli/pods-command.js';

describe('agent configuration', () => {
  it("has Istio's defaults", () => {
    const c = loadAgentConfig([], {});
    expect(c).toMatchObject({
      cniBinDir: '/host/opt/cni/bin',
      cniConfDir: '/host/etc/cni/net.d',
      runDir: '/var/run/istio-cni',
      zdsSocket: '/var/run/ztunnel/ztunnel.sock',
      kubeMode: 'auto',
      excludeNamespaces: [],
      dnsCapture: true,
      ipv6: true,
      backend: 'nftables',
      netnsRoot: '/host',
      netnsDirs: [],
      procDir: '/host/proc',
      healthPort: 8000,
      metricsPort: 15014,
      hostProbeSnatIpv4: '169.254.7.127',
      hostProbeSnatIpv6: 'fd16:9254:7127:1337:ffff:ffff:ffff:ffff',
      systemNamespace: 'istio-system',
      reconcilePodRulesOnStartup: true,
      reconcileEnrollmentIntervalMs: 30_000,
      reconcileNftPollMs: 2_000,
      chainedCniPlugin: true,
      istioOwnedCniConfig: false,
    });
  });

  it('reads the environment variables Istio sets, and flags beat them', () => {
    const env = {
      EXCLUDE_NAMESPACES: 'kube-system, istio-system ,',
      AMBIENT_DNS_CAPTURE: 'false',
      NATIVE_NFTABLES: 'false',
      MONITORING_PORT: '9090',
      CNI_AGENT_RUN_DIR: '/run/x',
      ZTUNNEL_UDS_ADDRESS: '/z.sock',
    };
    const c = loadAgentConfig([], env);
    expect(c).toMatchObject({
      excludeNamespaces: ['kube-system', 'istio-system'],
      dnsCapture: false,
      backend: 'iptables',
      metricsPort: 9090,
      runDir: '/run/x',
      zdsSocket: '/z.sock',
    });
    const flagged = loadAgentConfig(['--dns-capture', 'true', '--backend', 'nftables', '--metrics-port', '15020'], env);
    expect(flagged).toMatchObject({ dnsCapture: true, backend: 'nftables', metricsPort: 15020 });
  });

  it("--tier-up-calls (CNI_AGENT_TIER_UP_CALLS): 20 by default, 0 keeps V8's own thresholds, anything but a count is a usage error", () => {
    expect(loadAgentConfig([], {}).tierUpCalls).toBe(20);
    expect(loadAgentConfig([], { CNI_AGENT_TIER_UP_CALLS: '0' }).tierUpCalls).toBe(0);
    expect(loadAgentConfig(['--tier-up-calls', '50'], { CNI_AGENT_TIER_UP_CALLS: '0' }).tierUpCalls).toBe(50);
    for (const bad of ['-1', '1e3', 'fast', '', '2000000'])
      expect(() => loadAgentConfig([], { CNI_AGENT_TIER_UP_CALLS: bad })).toThrow(
        `--tier-up-calls: expected a number of calls from 0 to 1000000, got ${JSON.stringify(bad)}`,
      );
  });

  it('AMBIENT_RECONCILE_ENROLLMENT_INTERVAL takes Go durations (0 turns the sweep off); anything else is a usage error', () => {
    expect(loadAgentConfig([], { AMBIENT_RECONCILE_ENROLLMENT_INTERVAL: '1m30s' }).reconcileEnrollmentIntervalMs).toBe(90_000);
    expect(loadAgentConfig(['--reconcile-enrollment-interval', '0'], {}).reconcileEnrollmentIntervalMs).toBe(0);
    expect(loadAgentConfig([], { CNI_AGENT_RECONCILE_NFT_POLL_INTERVAL: '250ms' }).reconcileNftPollMs).toBe(250);
    expect(loadAgentConfig(['--reconcile-nft-poll-interval', '0'], {}).reconcileNftPollMs).toBe(0);
    expect(() => loadAgentConfig(['--reconcile-nft-poll-interval', '1ms'], {})).toThrow(
      /--reconcile-nft-poll-interval: 0 or at least 10ms, got 1ms/,
    );
    expect([
      parseGoDurationMs('500ms'),
      parseGoDurationMs('2h'),
      parseGoDurationMs('1.5s'),
      parseGoDurationMs('30'),
      parseGoDurationMs('5 s'),
      parseGoDurationMs(''),
    ]).toEqual([500, 7_200_000, 1_500, undefined, undefined, undefined]);
    expect(() => loadAgentConfig([], { AMBIENT_RECONCILE_ENROLLMENT_INTERVAL: 'often' })).toThrow(
      /--reconcile-enrollment-interval: expected a duration such as 30s, 1m or 0, got "often"/,
    );
  });

  it('reports every bad value, one line each', () => {
    let err: unknown;
    try {
      loadAgentConfig(['--kube-mode', 'k8s', '--health-port', '70000', '--snat-ipv4', '1.2.3', '--log-level', 'loud'], {
        AMBIENT_IPV6: 'yes',
        AMBIENT_ENABLED: 'false',
      });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(UsageError);
    expect((err as Error).message.split('\n')).toEqual([
      '--kube-mode: expected auto or none, got "k8s"',
      '--snat-ipv4: not an IPv4 address: "1.2.3"',
      '--log-level: unknown level "loud" (want one of trace, debug, info, warn, error, fatal, silent)',
      '--ipv6: expected true or false, got "yes"',
      '--health-port: expected a port number, got "70000"',
      '--ambient-enabled: only ambient mode is implemented (sidecar-mode CNI is not); it must be true',
    ]);
  });

  it('takes extra netns directories (NETNS_DIRS, --netns-dirs) and refuses ones that are no directory of netns files', () => {
    const dirs = '/data/containerd/io.containerd.grpc.v1.cri/netns, /run/custom/netns';
    expect(loadAgentConfig([], { NETNS_DIRS: dirs }).netnsDirs).toEqual([
      '/data/containerd/io.containerd.grpc.v1.cri/netns',
      '/run/custom/netns',
    ]);
    expect(() => loadAgentConfig(['--netns-dirs', '/proc/1/ns,relative,/x/../y'], {})).toThrow(
      [
        '--netns-dirs: "/proc/1/ns" a kernel filesystem, not a runtime netns directory',
        '--netns-dirs: "relative" is not an absolute path',
        '--netns-dirs: "/x/../y" has a ".." segment',
      ].join('\n'),
    );
  });

  it('rejects unknown flags', () => {
    expect(() => loadAgentConfig(['--nope'], {})).toThrow(UsageError);
  });

  it('lists every flag with its env var and default in --help', () => {
    const text = usage();
    for (const o of OPTIONS) {
      expect(text).toContain(`--${o.flag}`);
      if (o.env) expect(text).toContain(o.env);
    }
  });
});

describe('pods table', () => {
  it('prints one line per pod with its netns, rules and ztunnel state', () => {
    const text = podsTable({
      mode: 'kubernetes',
      ready: true,
      connections: [{ id: 3, state: 'ready', connectedAt: '2026-01-01T00:00:00.000Z' }],
      pods: [
        {
          uid: 'u1',
          namespace: 'shop',
          name: 'web',
          netnsInode: 4026532001,
          rules: 'verified',
          lastVerified: '2026-01-01T00:00:30.000Z',
          repairs: 2,
          ztunnel: { '3': 'acked' },
        },
      ],
    });
    expect(text.split('\n')).toEqual([
      'mode: kubernetes, ready: true, ztunnel connections: #3 ready since 2026-01-01T00:00:00.000Z',
      'NAMESPACE  NAME  UID  NETNS       RULES     LAST VERIFIED             REPAIRS  ZTUNNEL',
      'shop       web   u1   4026532001  verified  2026-01-01T00:00:30.000Z  2        #3:acked',
      '',
    ]);
  });
});
