// The pod's loopback must be up before anything else happens in the pod netns. containerd
// brings `lo` up concurrently with the CNI chain, so the agent can arrive first: with `lo` down
// the IPv6 local route is refused ("Nexthop device is not up") and ztunnel cannot bind
// 127.0.0.1:15053 in the pod. Bringing it up ourselves (idempotent) makes the order irrelevant.
import type { SetLinkUpStep } from '../addon/steps.js';
import { LOOPBACK_INTERFACE } from './constants.js';

/** The first step of every apply, in the same netns visit as the rules. */
export const LOOPBACK_UP_STEP: SetLinkUpStep = { op: 'setLinkUp', dev: LOOPBACK_INTERFACE };
