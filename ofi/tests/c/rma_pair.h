/* What the one-process RMA tests (fi_rma.c, fi_rma_event.c) share: two
 * endpoints A and B on CQs cq_a and cq_b, driven while waiting (progress
 * is manual), and the helpers that wait on them. Include after must.h. */
#ifndef RMA_PAIR_H
#define RMA_PAIR_H

#include <stdint.h>
#include <string.h>
#include <time.h>

#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#define WAIT_SEC 30

static struct fid_cq *cq_a, *cq_b;

static inline double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* Posts an RMA operation, retrying while the provider asks to
 * (-FI_EAGAIN: a connection is being set up), driving both CQs. */
#define POST(call)                                                         \
	do {                                                               \
		double _end = now() + WAIT_SEC;                            \
		ssize_t _r;                                                \
		while ((_r = (call)) == -FI_EAGAIN) {                      \
			(void)fi_cq_read(cq_a, NULL, 0);                   \
			(void)fi_cq_read(cq_b, NULL, 0);                   \
			CHECK(now() < _end, "%s still refused", #call);     \
		}                                                          \
		MUST(_r);                                                  \
	} while (0)

/* Reads one completion from `cq`, driving the other CQ meanwhile (whose
 * entries must not come: the caller waits for them in turn). */
static inline void one(struct fid_cq *cq, struct fid_cq *other, struct fi_cq_data_entry *e)
{
	double end = now() + WAIT_SEC;
	for (;;) {
		ssize_t r = fi_cq_read(cq, e, 1);
		if (r == 1)
			return;
		if (r == -FI_EAVAIL) {
			struct fi_cq_err_entry err = {0};
			MUST(fi_cq_readerr(cq, &err, 0));
			CHECK(0, "completion error %d (%s)", err.err, fi_strerror(err.err));
		}
		CHECK(r == -FI_EAGAIN, "fi_cq_read = %zd", r);
		(void)fi_cq_read(other, NULL, 0); /* progress, reading nothing */
		CHECK(now() < end, "no completion");
	}
}

/* Whether `n` bytes at `dst` become `src`, driving B meanwhile (with
 * manual progress the target applies a write when it is driven). */
static inline int landed(const char *dst, const char *src, size_t n)
{
	double end = now() + WAIT_SEC;
	while (memcmp(dst, src, n)) {
		(void)fi_cq_read(cq_b, NULL, 0);
		if (now() > end)
			return 0;
	}
	return 1;
}

/* Opens an endpoint with a CQ of its own bound for both directions, and
 * the counters given (NULL: none) bound with their flags; enables it. */
static inline void open_ep(struct fid_domain *domain, struct fi_info *info, struct fid_av *av, struct fid_ep **ep,
		    struct fid_cq **cq, struct fid_cntr *c1, uint64_t f1, struct fid_cntr *c2, uint64_t f2)
{
	struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_DATA};
	MUST(fi_cq_open(domain, &cq_attr, cq, NULL));
	MUST(fi_endpoint(domain, info, ep, NULL));
	MUST(fi_ep_bind(*ep, &av->fid, 0));
	MUST(fi_ep_bind(*ep, &(*cq)->fid, FI_TRANSMIT | FI_RECV));
	if (c1)
		MUST(fi_ep_bind(*ep, &c1->fid, f1));
	if (c2)
		MUST(fi_ep_bind(*ep, &c2->fid, f2));
	MUST(fi_enable(*ep));
}

#endif
