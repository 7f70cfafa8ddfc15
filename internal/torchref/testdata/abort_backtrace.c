/* Preloaded (LD_PRELOAD) into the torchrun ranks of internal/torchref's
 * tests: a thread that aborts (SIGABRT, e.g. std::terminate) prints its
 * native backtrace to stderr before the process dies, so that a rare abort
 * in CI shows where it came from (docs/pytorch.md, "The SIGABRT at
 * interpreter exit"). */
#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static void on_abort(int sig) {
	static const char msg[] = "detcoll-test: SIGABRT; native backtrace of the aborting thread:\n";
	void *frames[64];
	int n;
	(void)sig;
	if (write(2, msg, sizeof msg - 1) < 0) {
		/* nothing to do: stderr is gone */
	}
	n = backtrace(frames, 64);
	backtrace_symbols_fd(frames, n, 2);
	signal(SIGABRT, SIG_DFL);
	raise(SIGABRT);
}

__attribute__((constructor)) static void install(void) {
	struct sigaction sa;
	void *f[1];
	backtrace(f, 1); /* loads libgcc_s now, not inside the handler */
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_abort;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGABRT, &sa, NULL);
}
