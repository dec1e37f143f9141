/*
 * mpi_first_contact.c - a 64 B MPI ping-pong whose first exchange is either
 * "crossed" (both ranks send to each other at once, as MPI_Barrier or
 * MPI_Sendrecv do) or "one-way" (rank 0 sends first, rank 1 answers). Over
 * xfer's TCP provider a crossed first contact opens one connection each way
 * and every later message travels on its sender's own connection, so no data
 * carries the other direction's TCP acknowledgement (docs/OFI.md, "Where the
 * plug-in path spends its time"). Prints the half round trip of 50,000
 * round trips after as many warm-up ones. Not part of `make test`.
 *
 *   mpicc -O2 bench/mpi_first_contact.c -o /tmp/first_contact
 *   mpirun -np 2 --bind-to core --mca pml cm --mca mtl ofi \
 *       --mca mtl_ofi_provider_include xfer -x FI_PROVIDER=xfer \
 *       -x FI_PROVIDER_PATH=$PWD/target/release -x XFER_TCP_ADDR=127.0.0.1 \
 *       /tmp/first_contact crossed        # or one-way
 */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int rank;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	int crossed = argc > 1 && !strcmp(argv[1], "crossed");
	char buf[64] = {0}, rb[64];
	int peer = 1 - rank;
	if (crossed) {
		MPI_Sendrecv(buf, 1, MPI_CHAR, peer, 1, rb, 1, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	} else if (rank == 0) {
		MPI_Send(buf, 1, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
		MPI_Recv(rb, 1, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	} else {
		MPI_Recv(rb, 1, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		MPI_Send(buf, 1, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
	}
	const int n = 50000;
	for (int pass = 0; pass < 2; pass++) {
		double t = MPI_Wtime();
		for (int i = 0; i < n; i++) {
			if (rank == 0) {
				MPI_Send(buf, 64, MPI_CHAR, 1, 2, MPI_COMM_WORLD);
				MPI_Recv(rb, 64, MPI_CHAR, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			} else {
				MPI_Recv(rb, 64, MPI_CHAR, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				MPI_Send(buf, 64, MPI_CHAR, 0, 2, MPI_COMM_WORLD);
			}
		}
		t = MPI_Wtime() - t;
		if (rank == 0 && pass == 1)
			printf("%s: 64 B half round trip %.2f usec\n", crossed ? "crossed" : "one-way", t / n / 2 * 1e6);
	}
	MPI_Finalize();
	return 0;
}
