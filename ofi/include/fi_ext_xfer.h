/* xfer's libfabric provider (libxfer_fi.so): its own endpoint options, for
 * fi_setopt/fi_getopt at FI_OPT_ENDPOINT, numbered as <rdma/fi_ext.h> asks
 * providers to (docs/OFI.md, "Provider-specific options"). Include it after
 * <rdma/fi_endpoint.h>. */
#ifndef FI_EXT_XFER_H
#define FI_EXT_XFER_H

#define FI_PROV_SPECIFIC_XFER (0xfe0 << 16)

enum {
	/* uint64_t: milliseconds a peer may make no progress (a stopped or hung
	 * process) while operations wait for it before they fail with
	 * FI_ETIMEDOUT; 0 never (the default, or XFER_PROGRESS_TIMEOUT_MS).
	 * Set before fi_enable; after it, -FI_EOPBADSTATE. */
	FI_OPT_XFER_PROGRESS_TIMEOUT_MS = -FI_PROV_SPECIFIC_XFER,
};

#endif
