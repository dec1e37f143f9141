/* MUST(call): a libfabric call that has to succeed; on a negative return the
 * program prints the call, its code and libfabric's text, and exits 2.
 * CHECK(cond, fmt, ...): a condition that has to hold; otherwise the program
 * prints it with the message and exits 1.
 * Shared by the C programs of ofi/tests/c. */
#ifndef XFER_OFI_TEST_MUST_H
#define XFER_OFI_TEST_MUST_H

#include <rdma/fi_errno.h>
#include <stdio.h>
#include <stdlib.h>

#define MUST(call)                                                         \
	do {                                                               \
		long _r = (long)(call);                                    \
		if (_r < 0) {                                              \
			fprintf(stderr, "FATAL %s:%d: %s = %ld (%s)\n",     \
				__FILE__, __LINE__, #call, _r,             \
				fi_strerror((int)-_r));                    \
			exit(2);                                           \
		}                                                          \
	} while (0)

#define CHECK(cond, ...)                                                    \
	do {                                                                \
		if (!(cond)) {                                              \
			fprintf(stderr, "CHECK %s:%d: %s: ", __FILE__,      \
				__LINE__, #cond);                           \
			fprintf(stderr, __VA_ARGS__);                       \
			fprintf(stderr, "\n");                              \
			exit(1);                                            \
		}                                                           \
	} while (0)

#endif
