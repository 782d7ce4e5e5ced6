package main

import (
	"fmt"
	"net"
	"sort"
)

// Interface is a network interface in the parts the tests must not change.
type Interface struct {
	// Up is the administrative state (IFF_UP).
	Up bool `json:"up"`
	// Addrs are its addresses in CIDR form, sorted; IPv6 link-local
	// addresses are left out (the kernel adds and drops them with the
	// carrier).
	Addrs []string `json:"addrs"`
}

// systemInterfaces lists the interfaces of the calling thread's network
// namespace (net.Interfaces asks the kernel over netlink).
func systemInterfaces() (map[string]Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	out := map[string]Interface{}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			return nil, fmt.Errorf("addresses of %s: %w", ifc.Name, err)
		}
		out[ifc.Name] = Interface{Up: ifc.Flags&net.FlagUp != 0, Addrs: stableAddrs(addrs)}
	}
	return out, nil
}

// stableAddrs returns addrs in CIDR form, sorted, without IPv6 link-local
// addresses.
func stableAddrs(addrs []net.Addr) []string {
	out := []string{}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() == nil && ipn.IP.IsLinkLocalUnicast() {
			continue
		}
		out = append(out, a.String())
	}
	sort.Strings(out)
	return out
}
