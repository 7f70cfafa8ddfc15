// two processes exchange N bytes each way over loopback TCP, ITERS times.
// mode 0: nonblocking progress loop, write pieces of P bytes, read whatever (MPI-like)
// mode 1: writer thread (blocking write of all) + reader in main (blocking reads)
// SNDBUF / RCVBUF in the environment set SO_SNDBUF / SO_RCVBUF (bytes) on both ends.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <time.h>
#include <sched.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/wait.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
static long N, P; static int fd; static char *sbuf,*rbuf;
static void *wr(void*a){long o=0;while(o<N){long w=write(fd,sbuf+o,N-o);if(w<0){perror("w");exit(1);}o+=w;}return 0;}
int main(int argc,char**argv){
  N=atol(argv[1]); int iters=atoi(argv[2]); int mode=atoi(argv[3]); P=argc>4?atol(argv[4]):N;
  int ls=socket(AF_INET,SOCK_STREAM,0); struct sockaddr_in a={0}; a.sin_family=AF_INET; a.sin_addr.s_addr=htonl(0x7f000001); a.sin_port=0;
  int one=1; setsockopt(ls,SOL_SOCKET,SO_REUSEADDR,&one,4); bind(ls,(void*)&a,sizeof a); listen(ls,1); socklen_t l=sizeof a; getsockname(ls,(void*)&a,&l);
  pid_t pid=fork(); int me;
  if(pid==0){fd=socket(AF_INET,SOCK_STREAM,0); if(connect(fd,(void*)&a,sizeof a)){perror("c");exit(1);} me=1;} else {fd=accept(ls,0,0); me=0;}
  setsockopt(fd,IPPROTO_TCP,TCP_NODELAY,&one,4); if(getenv("SNDBUF")){int s=atoi(getenv("SNDBUF"));setsockopt(fd,SOL_SOCKET,SO_SNDBUF,&s,4);} if(getenv("RCVBUF")){int s=atoi(getenv("RCVBUF"));setsockopt(fd,SOL_SOCKET,SO_RCVBUF,&s,4);}
  sbuf=malloc(N); rbuf=malloc(N); memset(sbuf,me,N); memset(rbuf,0,N);
  if(mode!=1) fcntl(fd,F_SETFL,O_NONBLOCK);
  double *t=malloc(sizeof(double)*iters);
  for(int it=0;it<iters;it++){
    double t0=now();
    if(mode==0){ long so=0,ro=0; while(so<N||ro<N){ int moved=0;
        if(so<N){long w=write(fd,sbuf+so,(N-so)<P?(N-so):P); if(w>0){so+=w;moved=1;}}
        if(ro<N){long r=read(fd,rbuf+ro,N-ro); if(r>0){ro+=r;moved=1;} else if(r==0){exit(2);}}
        if(!moved){struct pollfd p={fd,(so<N?POLLOUT:0)|(ro<N?POLLIN:0),0}; poll(&p,1,0);} } }
    else if(mode==2){ long so=0,ro=0; while(so<N){long w=write(fd,sbuf+so,N-so); if(w>0)so+=w; else {long r=read(fd,rbuf+ro,N-ro); if(r>0)ro+=r;}}
        while(ro<N){long r=read(fd,rbuf+ro,N-ro); if(r>0)ro+=r; else sched_yield();} }
    else { pthread_t th; pthread_create(&th,0,wr,0); long ro=0; while(ro<N){long r=read(fd,rbuf+ro,N-ro); if(r<=0){perror("r");exit(1);} ro+=r;} pthread_join(th,0);}
    t[it]=now()-t0;
  }
  // median of last iters
  for(int i=1;i<iters;i++){double v=t[i];int j=i-1;while(j>=0&&t[j]>v){t[j+1]=t[j];j--;}t[j+1]=v;}
  if(me==0){printf("N=%ld mode=%d P=%ld median %.1f us p10 %.1f p90 %.1f\n",N,mode,P,t[iters/2],t[iters/10],t[iters*9/10]);}
  if(pid) wait(0);
  return 0;
}
