// The policy-routing half of in-pod redirection: `ip rule add fwmark 0x111/0xfff pref 32764
// lookup 100` and `ip route replace local 0.0.0.0/0 dev lo table 100` (and the IPv6 pair), so
// that replies whose connmark was restored reach ztunnel's transparent sockets locally.
import type {
  FwmarkRuleSpec,
  LocalRouteSpec,
  Family,
  Step,
  RouteEntry,
  FwmarkRuleEntry,
  RoutingChange,
  RoutingStep,
} from '../addon/steps.js';
import { RTN_LOCAL } from '../addon/steps.js';
import { IP_RULE_PRIORITY, INPOD_TPROXY_MARK, INPOD_TPROXY_MASK, LOOPBACK_INTERFACE, ROUTE_TABLE_INBOUND } from './constants.js';
import { driftReport, type DriftItem, type DriftReport } from './drift.js';

function families(ipv6: boolean): Family[] {
  return ipv6 ? [4, 6] : [4];
}

export function fwmarkRule(family: Family): FwmarkRuleSpec {
  return { family, mark: INPOD_TPROXY_MARK, mask: INPOD_TPROXY_MASK, priority: IP_RULE_PRIORITY, table: ROUTE_TABLE_INBOUND };
}

export function localRoute(family: Family): LocalRouteSpec {
  return { family, table: ROUTE_TABLE_INBOUND, dev: LOOPBACK_INTERFACE };
}

/**
 * Istio's nftables path adds the route, then the rule; the IPv6 route unless IPv6 is disabled on
 * lo (Istio's disable_ipv6 test). All of it goes to the kernel in one rtnetlink sendmsg. Runs
 * after LOOPBACK_UP_STEP: the kernel refuses the IPv6 route while lo is down.
 */
export function routingApplySteps(ipv6: boolean): readonly RoutingStep[] {
  return ROUTING_APPLY[ipv6 ? 'v6' : 'v4'];
}

function buildRoutingApply(ipv6: boolean): readonly RoutingStep[] {
  const changes = families(ipv6).flatMap((family): RoutingChange[] => [
    { kind: 'replaceLocalRoute', ...localRoute(family), skipWithoutIpv6: family === 6 },
    { kind: 'addFwmarkRule', ...fwmarkRule(family) },
  ]);
  return Object.freeze([{ op: 'routing', changes }]);
}

/** Built once: every pod's apply sends the same steps (the addon only reads them). */
const ROUTING_APPLY = { v4: buildRoutingApply(false), v6: buildRoutingApply(true) };

/** Deleting what is already gone succeeds (unlike Istio, which retries forever: istio#58293). */
export function routingDeleteSteps(ipv6: boolean): RoutingStep[] {
  const changes = families(ipv6).flatMap((family): RoutingChange[] => [
    { kind: 'deleteFwmarkRule', ...fwmarkRule(family) },
    { kind: 'deleteLocalRoute', ...localRoute(family) },
  ]);
  return [{ op: 'routing', changes }];
}

export interface RoutingState {
  family: Family;
  rules: FwmarkRuleEntry[];
  routes: RouteEntry[];
  /** Whether the route is expected at all (IPv6 needs IPv6 enabled on lo). */
  routeExpected: boolean;
}

export function routingListSteps(ipv6: boolean): Step[] {
  return [
    ...families(ipv6).flatMap((family): Step[] => [
      { op: 'listFwmarkRules', family },
      { op: 'listRoutes', family, table: ROUTE_TABLE_INBOUND },
    ]),
    { op: 'deviceHasIpv6', dev: LOOPBACK_INTERFACE },
  ];
}

/** Turns the results of routingListSteps back into one state per family. */
export function routingStates(ipv6: boolean, results: readonly unknown[]): RoutingState[] {
  const hasIpv6 = (results[results.length - 1] as { hasIpv6: boolean }).hasIpv6;
  return families(ipv6).map((family, i) => ({
    family,
    rules: (results[2 * i] as { rules: FwmarkRuleEntry[] }).rules,
    routes: (results[2 * i + 1] as { routes: RouteEntry[] }).routes,
    routeExpected: family === 4 || hasIpv6,
  }));
}

function sameRule(a: FwmarkRuleSpec, b: FwmarkRuleSpec): boolean {
  return a.mark === b.mark && a.mask === b.mask && a.priority === b.priority && a.table === b.table;
}

function isOurRoute(r: RouteEntry): boolean {
  return r.dstLen === 0 && r.type === RTN_LOCAL && r.dev === LOOPBACK_INTERFACE;
}

export function routingDrift(states: readonly RoutingState[]): DriftReport {
  const missing: DriftItem[] = [];
  const extra: DriftItem[] = [];
  for (const s of states) {
    const where = `ipv${s.family}`;
    const want = fwmarkRule(s.family);
    const ruleText = `fwmark 0x${want.mark.toString(16)}/0x${want.mask.toString(16)} pref ${want.priority} lookup ${want.table}`;
    const copies = s.rules.filter((r) => sameRule(r, want)).length;
    if (copies === 0) missing.push({ kind: 'ip-rule', where, text: ruleText });
    for (let i = 1; i < copies; i++) extra.push({ kind: 'ip-rule', where, text: ruleText });
    const routeText = `local ${s.family === 6 ? '::/0' : '0.0.0.0/0'} dev lo table ${want.table}`;
    if (s.routeExpected && !s.routes.some(isOurRoute)) missing.push({ kind: 'route', where, text: routeText });
  }
  return driftReport(missing, extra);
}
