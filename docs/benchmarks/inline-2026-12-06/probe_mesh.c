// W processes, full mesh over loopback TCP; each iteration every rank sends N bytes to every peer
// and receives N from every peer (AllGather's direct exchange), single-threaded nonblocking progress:
// write pieces of at most P bytes per attempt, read at most R bytes per attempt.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <time.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/wait.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
int main(int argc,char**argv){
  int W=atoi(argv[1]); long N=atol(argv[2]); int iters=atoi(argv[3]); long P=atol(argv[4]); long R=atol(argv[5]);
  int ls[16]; struct sockaddr_in a[16];
  for(int i=0;i<W;i++){ls[i]=socket(AF_INET,SOCK_STREAM,0); memset(&a[i],0,sizeof a[i]); a[i].sin_family=AF_INET; a[i].sin_addr.s_addr=htonl(0x7f000001); int one=1; setsockopt(ls[i],SOL_SOCKET,SO_REUSEADDR,&one,4); bind(ls[i],(void*)&a[i],sizeof a[i]); listen(ls[i],16); socklen_t l=sizeof a[i]; getsockname(ls[i],(void*)&a[i],&l);}
  int me=0; for(int i=1;i<W;i++){ if(fork()==0){me=i;break;} }
  int fd[16];
  // rank i connects to j<i? simple: lower rank accepts from higher
  for(int j=0;j<W;j++){ if(j==me) continue; if(j<me){ fd[j]=socket(AF_INET,SOCK_STREAM,0); while(connect(fd[j],(void*)&a[j],sizeof a[j])) usleep(1000); int id=me; write(fd[j],&id,4);} }
  for(int k=0;k<W-1-me;k++){ int c=accept(ls[me],0,0); int id; read(c,&id,4); fd[id]=c; }
  for(int j=0;j<W;j++){ if(j==me) continue; int one=1; setsockopt(fd[j],IPPROTO_TCP,TCP_NODELAY,&one,4); fcntl(fd[j],F_SETFL,O_NONBLOCK);}
  char *sb=malloc(N), *rb=malloc(N*W); memset(sb,me,N); memset(rb,0,N*W);
  double *t=malloc(sizeof(double)*iters);
  for(int it=0;it<iters;it++){
    double t0=now(); long so[16]={0}, ro[16]={0}; int left=2*(W-1);
    memcpy(rb+me*N,sb,N);
    while(left>0){ int moved=0;
      for(int j=0;j<W;j++){ if(j==me) continue;
        if(so[j]<N){ long k=N-so[j]; if(k>P)k=P; long w=write(fd[j],sb+so[j],k); if(w>0){so[j]+=w;moved=1; if(so[j]==N)left--;} }
        if(ro[j]<N){ long k=N-ro[j]; if(k>R)k=R; long r=read(fd[j],rb+j*N+ro[j],k); if(r>0){ro[j]+=r;moved=1; if(ro[j]==N)left--;} else if(r==0) exit(3);} }
      if(!moved) sched_yield(); }
    t[it]=now()-t0;
    // barrier-ish: none
  }
  for(int i=1;i<iters;i++){double v=t[i];int j=i-1;while(j>=0&&t[j]>v){t[j+1]=t[j];j--;}t[j+1]=v;}
  if(me==0) printf("W=%d N=%ld P=%ld R=%ld median %.1f p10 %.1f p90 %.1f\n",W,N,P,R,t[iters/2],t[iters/10],t[iters*9/10]);
  if(me==0) for(int i=1;i<W;i++) wait(0);
  return 0;
}
