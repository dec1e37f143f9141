/* What the one-process C tests share to wait while driving their endpoints
 * (progress is manual: a CQ read drives its endpoints): a clock, the wait
 * limit, posting with retries, waiting for one completion, and closing the
 * domain's objects. Include after must.h. */
#ifndef XFER_OFI_TEST_DRIVE_H
#define XFER_OFI_TEST_DRIVE_H

#include <string.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>

#define WAIT_SEC 30

static inline double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* Posts with `call`, retrying while the provider asks to (-FI_EAGAIN: a
 * connection is being set up), driving CQs `a` and `b` without reading
 * them; fails the program after WAIT_SEC. */
#define POST_DRIVING(call, a, b)                                           \
	do {                                                               \
		double _end = now() + WAIT_SEC;                            \
		ssize_t _r;                                                \
		while ((_r = (call)) == -FI_EAGAIN) {                      \
			(void)fi_cq_read((a), NULL, 0);                    \
			(void)fi_cq_read((b), NULL, 0);                    \
			CHECK(now() < _end, "%s still refused", #call);     \
		}                                                          \
		MUST(_r);                                                  \
	} while (0)

/* POST_DRIVING on the program's two CQs, cq_a and cq_b. */
#define POST(call) POST_DRIVING(call, cq_a, cq_b)

/* Reads the next completion of `cq` into `e` (an entry of the CQ's
 * format), driving `other` meanwhile (progress, reading nothing: its
 * entries wait for their turn; NULL: none). 0 for an entry; 1 for an error
 * entry, read into `err` (NULL: the program fails with it). Fails the
 * program after WAIT_SEC. */
static inline int next_completion(struct fid_cq *cq, struct fid_cq *other, void *e, struct fi_cq_err_entry *err)
{
	double end = now() + WAIT_SEC;
	for (;;) {
		ssize_t r = fi_cq_read(cq, e, 1);
		if (r == 1)
			return 0;
		if (r == -FI_EAVAIL) {
			struct fi_cq_err_entry mine = {0};
			struct fi_cq_err_entry *into = err ? err : &mine;
			memset(into, 0, sizeof(*into));
			MUST(fi_cq_readerr(cq, into, 0));
			CHECK(err, "completion error %d (%s)", into->err, fi_strerror(into->err));
			return 1;
		}
		CHECK(r == -FI_EAGAIN, "fi_cq_read = %zd", r);
		if (other)
			(void)fi_cq_read(other, NULL, 0);
		CHECK(now() < end, "no completion");
	}
}

/* Opens the fabric and domain of `info` and, when the provider asks for
 * FI_MR_LOCAL, a region over `len` bytes at `mem` for sends and receives
 * (*mr and its descriptor *desc; NULL both otherwise). */
static inline void open_domain(struct fi_info *info, void *mem, size_t len, struct fid_fabric **fabric,
			       struct fid_domain **domain, struct fid_mr **mr, void **desc)
{
	MUST(fi_fabric(info->fabric_attr, fabric, NULL));
	MUST(fi_domain(*fabric, info, domain, NULL));
	*mr = NULL;
	*desc = NULL;
	if (info->domain_attr->mr_mode & FI_MR_LOCAL) {
		MUST(fi_mr_reg(*domain, mem, len, FI_SEND | FI_RECV, 0, 0, 0, mr, NULL));
		*desc = fi_mr_desc(*mr);
	}
}

/* Opens an endpoint on `av` with a CQ of `format` of its own for both
 * directions, and enables it. */
static inline void open_ep_on(struct fid_domain *domain, struct fi_info *info, struct fid_av *av,
			      enum fi_cq_format format, struct fid_ep **ep, struct fid_cq **cq)
{
	struct fi_cq_attr cq_attr = {.format = format};
	MUST(fi_cq_open(domain, &cq_attr, cq, NULL));
	MUST(fi_endpoint(domain, info, ep, NULL));
	MUST(fi_ep_bind(*ep, &av->fid, 0));
	MUST(fi_ep_bind(*ep, &(*cq)->fid, FI_TRANSMIT | FI_RECV));
	MUST(fi_enable(*ep));
}

/* Closes two endpoints, then their CQs. */
static inline void close_eps(struct fid_ep *a, struct fid_ep *b, struct fid_cq *cq_of_a, struct fid_cq *cq_of_b)
{
	MUST(fi_close(&a->fid));
	MUST(fi_close(&b->fid));
	MUST(fi_close(&cq_of_a->fid));
	MUST(fi_close(&cq_of_b->fid));
}

/* Closes what every test opens last: the AV, the region (if any), the
 * domain, the fabric and the fi_info. */
static inline void close_domain(struct fid_av *av, struct fid_mr *mr, struct fid_domain *domain,
				struct fid_fabric *fabric, struct fi_info *info)
{
	MUST(fi_close(&av->fid));
	if (mr)
		MUST(fi_close(&mr->fid));
	MUST(fi_close(&domain->fid));
	MUST(fi_close(&fabric->fid));
	fi_freeinfo(info);
}

#endif
