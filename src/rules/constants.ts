// Istio ambient CNI constants (cni/pkg/config/config.go and friends).
// Several of these are a contract with other components, so they must not drift:
// the in-pod mark must equal ztunnel's DEFAULT_INPOD_MARK, the probe SNAT addresses
// must match what NetworkPolicies were written against, and the table/chain/set names
// are what a previous Istio agent (or this one, before an upgrade) left behind.

/** SO_MARK ztunnel sets on every socket it opens inside the pod (1337). */
export const INPOD_MARK = 0x539;
/** Only the low 12 bits of the packet mark belong to us; other agents use the rest. */
export const INPOD_MASK = 0xfff;
/** Connmark given to connections ztunnel accepted, so replies can be routed back to it. */
export const INPOD_TPROXY_MARK = 0x111;
export const INPOD_TPROXY_MASK = 0xfff;
/** Masks for CONNMARK --restore-mark: copy the whole connmark into the packet mark. */
export const INPOD_RESTORE_MASK = 0xffffffff;

/** Policy-routing table that delivers marked replies locally (to ztunnel's transparent sockets). */
export const ROUTE_TABLE_INBOUND = 100;
/** Priority of `ip rule add fwmark 0x111/0xfff lookup 100`. */
export const IP_RULE_PRIORITY = 32764;

export const ZTUNNEL_OUTBOUND_PORT = 15001;
export const ZTUNNEL_INBOUND_PLAINTEXT_PORT = 15006;
/** HBONE is already mesh traffic, so inbound redirection must leave it alone. */
export const ZTUNNEL_INBOUND_HBONE_PORT = 15008;
export const ZTUNNEL_DNS_PORT = 15053;
export const DNS_PORT = 53;
/** Conntrack zone that keeps ztunnel's upstream DNS flows apart from the app's (istio#33469). */
export const DNS_CONNTRACK_ZONE = 1;

/** Loopback destinations that are never redirected (the app talking to itself). */
export const LOOPBACK_CIDR_V4 = '127.0.0.1/32';
export const LOOPBACK_CIDR_V6 = '::1/128';
export const LOOPBACK_INTERFACE = 'lo';

/** nftables table names; all are family `inet`. */
export const NFT_TABLE_NAT = 'istio-ambient-nat';
export const NFT_TABLE_MANGLE = 'istio-ambient-mangle';
export const NFT_TABLE_RAW = 'istio-ambient-raw';
export const NFT_FAMILY = 'inet';

/** iptables chains created by the agent. */
export const IPT_CHAIN_PREROUTING = 'ISTIO_PRERT';
export const IPT_CHAIN_OUTPUT = 'ISTIO_OUTPUT';
export const IPT_CHAIN_POSTROUTING = 'ISTIO_POSTRT';

/** Host-netns sets (ipset or nft set) holding the IPs of enrolled pods, for probe SNAT. */
export const PROBE_SET_V4 = 'istio-inpod-probes-v4';
export const PROBE_SET_V6 = 'istio-inpod-probes-v6';

/** Defaults of HOST_PROBE_SNAT_IP / HOST_PROBE_SNAT_IPV6. */
export const DEFAULT_HOST_PROBE_SNAT_IPV4 = '169.254.7.127';
export const DEFAULT_HOST_PROBE_SNAT_IPV6 = 'fd16:9254:7127:1337:ffff:ffff:ffff:ffff';

/** Per-pod annotations read by the agent. */
export const ANNOTATION_BYPASS_INBOUND_CAPTURE = 'ambient.istio.io/bypass-inbound-capture';
export const ANNOTATION_DNS_CAPTURE = 'ambient.istio.io/dns-capture';
export const ANNOTATION_REROUTE_VIRTUAL_INTERFACES = 'istio.io/reroute-virtual-interfaces';

/** Linux IFNAMSIZ is 16 including the terminating NUL. */
export const MAX_INTERFACE_NAME_BYTES = 15;
