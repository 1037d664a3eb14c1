// Istio's command line (cni/pkg/cmd/root.go + pkg/log): install-cni's flags, the per-scope levels
// with Istio's syntax, Istio's two log formats, and the chart's environment accepted as is.
import { describe, expect, it } from 'vitest';
import { ACCEPTED_UNUSED_ENV, loadAgentConfig, OPTIONS, optionsHelp } from '../../src/agent/config.js';
import { INSTALL_CNI_USAGE, parseInstallCniArgs } from '../../src/cli/install-cni-command.js';
import { commandLine, main } from '../../src/cli/main.js';
import { UsageError } from '../../src/util/usage-error.js';
import { applyOutputLevels, uniformLevels } from '../../src/ops/log-levels.js';
import { createLogger, scopeLogger, type LogFormat } from '../../src/ops/log.js';
import { istioChartEnv } from '../helpers/istio-chart-env.js';

describe('install-cni arguments', () => {
  it("translates Istio's flags in pflag's forms and passes run's flags through", () => {
    expect(parseInstallCniArgs(['--log_output_level=default:info,cni-agent:debug', '--log_as_json'])).toEqual({
      runArgs: ['--log-output-level', 'default:info,cni-agent:debug'],
      json: true,
      help: false,
    });
    expect(parseInstallCniArgs(['--log_output_level', 'info', '--log_as_json=false', '--health-port', '0'])).toEqual({
      runArgs: ['--log-output-level', 'info', '--health-port', '0'],
      json: false,
      help: false,
    });
    expect(parseInstallCniArgs(['--help']).help).toBe(true);
    expect(() => parseInstallCniArgs(['--log_as_json=maybe'])).toThrow(UsageError);
    expect(() => parseInstallCniArgs(['--log_output_level'])).toThrow(/a value is needed/);
  });

  it('is the command when the program is started as install-cni (the image links it)', () => {
    expect(commandLine('/usr/local/bin/install-cni', ['--log_as_json'])).toEqual(['install-cni', '--log_as_json']);
    expect(commandLine('/app/dist/src/cli/main.js', ['run'])).toEqual(['run']);
  });

  it('--help documents the flags, every variable and the chart variables accepted without use', async () => {
    const out: string[] = [];
    expect(await main(['install-cni', '--help'], { out: (t) => out.push(t), err: (t) => out.push(t) })).toBe(0);
    const text = out.join('');
    expect(text.startsWith(INSTALL_CNI_USAGE)).toBe(true);
    for (const word of ['--log_output_level', '--log_as_json', 'cni-agent', 'cni-plugin', 'default', 'none']) expect(text).toContain(word);
    for (const o of OPTIONS) if (o.env) expect(text).toContain(o.env);
    for (const v of ACCEPTED_UNUSED_ENV) expect(text).toContain(v.env);
    expect(text).toContain(optionsHelp());
  });

  it('an unknown flag is a usage error (exit 2), as cobra refuses one', async () => {
    const err: string[] = [];
    expect(await main(['install-cni', '--log_caller=x'], { out: () => undefined, err: (t) => err.push(t) })).toBe(2);
    expect(err.join('')).toMatch(/log_caller/);
  });
});

describe("Istio's chart environment", () => {
  // The chart's environment (test/helpers/istio-chart-env.ts) with an owned config and a named
  // primary: the variables the chart renders only when they are set.
  const CHART_ENV = istioChartEnv({
    CURRENT_AGENT_VERSION: '1.28.0',
    CNI_CONF_NAME: '10-calico.conflist',
    ISTIO_OWNED_CNI_CONFIG: 'true',
    ISTIO_OWNED_CNI_CONF_FILENAME: '',
  });

  it('every variable the chart sets is one the agent reads or one it accepts unused, with the reason', () => {
    const read = new Set(OPTIONS.map((o) => o.env));
    const unused = new Set(ACCEPTED_UNUSED_ENV.map((v) => v.env));
    const unknown = Object.keys(CHART_ENV).filter((n) => !read.has(n) && !unused.has(n));
    expect(unknown).toEqual([]);
    expect([...read].filter((n) => n !== undefined && unused.has(n))).toEqual([]); // never both
  });

  it('loads without a problem and maps onto the settings', () => {
    const c = loadAgentConfig([], CHART_ENV);
    expect(c).toMatchObject({
      backend: 'iptables',
      excludeNamespaces: ['kube-system'],
      nodeName: 'node-1',
      podNamespace: 'istio-system',
      cniConfName: '10-calico.conflist',
      istioOwnedCniConfig: true,
      enableAmbientDetectionRetry: false,
      logLevelProblem: undefined,
    });
    // The chart's misspelt ISTIO_OWNED_CNI_CONF_FILENAME is not Istio's variable: the default name stays.
    expect(
      loadAgentConfig([], { ...CHART_ENV, ISTIO_OWNED_CNI_CONF_FILENAME: '05-x.conflist' }).istioOwnedCniConfigFilename,
    ).toBeUndefined();
  });
});

describe('--log_output_level (pkg/log processLevels)', () => {
  const base = uniformLevels('info');
  it('a bare level is the default scope; all is every scope; unknown scopes are ignored', () => {
    expect(applyOutputLevels('debug', base).levels).toEqual({ default: 'debug', 'cni-agent': 'info', 'cni-plugin': 'info' });
    expect(applyOutputLevels('all:warn,cni-plugin:debug', base).levels).toEqual({
      default: 'warn',
      'cni-agent': 'warn',
      'cni-plugin': 'debug',
    });
    expect(applyOutputLevels('default:info,cni-agent:debug,ztunnel:error,grpc:none', base)).toEqual({
      levels: { default: 'info', 'cni-agent': 'debug', 'cni-plugin': 'info' },
    });
    expect(applyOutputLevels('cni-agent:none', base).levels['cni-agent']).toBe('silent');
    expect(applyOutputLevels('', base)).toEqual({ levels: base });
  });
  it('the first bad entry stops the processing with Istio message; what came before stays', () => {
    expect(applyOutputLevels('cni-agent:debug,cni-plugin:loud,default:error', base)).toEqual({
      levels: { ...base, 'cni-agent': 'debug' },
      error: "invalid output level 'loud'",
    });
    expect(applyOutputLevels('a:b:c', base).error).toBe("invalid output level format 'a:b:c'");
    expect(applyOutputLevels('info,,debug', base).error).toBe("invalid output level ''");
    expect(applyOutputLevels('trace', base).error).toBe("invalid output level 'trace'"); // pino's name, not Istio's
  });
  it("LOG_LEVEL is every scope's start, refined by the flag; a bad flag is reported, not fatal", () => {
    const c = loadAgentConfig(['--log-output-level', 'cni-plugin:error,x:y:z'], { LOG_LEVEL: 'debug' });
    expect(c.logLevels).toEqual({ default: 'debug', 'cni-agent': 'debug', 'cni-plugin': 'error' });
    expect(c.logLevelProblem).toBe("invalid output level format 'x:y:z'");
  });
});

describe("Istio's log formats", () => {
  function capture(format: LogFormat, spec = '') {
    const lines: string[] = [];
    const levels = applyOutputLevels(spec, uniformLevels('info')).levels;
    const log = createLogger({ levels, format, destination: { write: (s) => lines.push(s) } });
    return { lines, log, plugin: scopeLogger(log, 'cni-plugin', levels), proc: scopeLogger(log, 'default', levels) };
  }

  it('--log_as_json: {"level","time","scope","msg",fields}, lowercase level, microsecond UTC time', () => {
    const { lines, log, plugin } = capture('istio-json');
    log.child({ component: 'zds' }).warn({ conn: 3 }, 'ztunnel handshake failed');
    plugin.info({ pod: 'shop/web' }, 'pod added');
    expect(lines).toHaveLength(2);
    expect(lines.every((l) => l.endsWith('\n'))).toBe(true);
    const [a, b] = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(Object.keys(a!)).toEqual(['level', 'time', 'scope', 'msg', 'component', 'conn']);
    expect(a).toMatchObject({ level: 'warn', scope: 'cni-agent', msg: 'ztunnel handshake failed', component: 'zds', conn: 3 });
    expect(a!['time']).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
    expect(b).toMatchObject({ level: 'info', scope: 'cni-plugin', msg: 'pod added', pod: 'shop/web' });
  });

  it('console (no --log_as_json): time, level, scope, message, then key=value labels, tab-separated', () => {
    const { lines, log, proc } = capture('istio-console');
    log.child({ component: 'enroller' }).error({ pod: 'shop/web', err: 'no netns', detail: { a: 1 } }, 'enrolment failed');
    proc.info('stopping');
    expect(lines[0]).toMatch(
      /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z\terror\tcni-agent\tenrolment failed\tcomponent=enroller pod=shop\/web err=no netns detail=\{"a":1\}\n$/,
    );
    expect(lines[1]).toMatch(/\tinfo\tdefault\tstopping\n$/);
  });

  it('each scope passes at its own level', () => {
    const { lines, log, plugin, proc } = capture('istio-json', 'cni-agent:warn,cni-plugin:debug,default:error');
    log.info('agent info: hidden');
    log.warn('agent warn');
    plugin.debug('plugin debug');
    proc.warn('process warn: hidden');
    proc.error('process error');
    expect(lines.map((l) => (JSON.parse(l) as { msg: string }).msg)).toEqual(['agent warn', 'plugin debug', 'process error']);
  });
});
