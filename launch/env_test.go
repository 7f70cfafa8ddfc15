package launch

import (
	"errors"
	"strings"
	"testing"
)

func TestFromEnv(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want Env
	}{
		{"single", nil, Env{WorldSize: 1, LocalWorldSize: 1, Source: SourceSingle}},
		{"single ignores MASTER_*", map[string]string{"MASTER_ADDR": "h", "MASTER_PORT": "1"},
			Env{WorldSize: 1, LocalWorldSize: 1, Source: SourceSingle}},
		{"single with explicit store", map[string]string{"DETCOLL_STORE_ADDR": "h:9", "DETCOLL_TOKEN": "t"},
			Env{WorldSize: 1, LocalWorldSize: 1, StoreAddr: "h:9", Token: "t", Source: SourceSingle}},
		{"detcoll", map[string]string{
			"DETCOLL_RANK": "5", "DETCOLL_WORLD_SIZE": "8", "DETCOLL_LOCAL_RANK": "1", "DETCOLL_LOCAL_WORLD_SIZE": "4",
			"DETCOLL_STORE_ADDR": "10.0.0.1:4000", "DETCOLL_TOKEN": "secret",
			// torchrun's, also present under the launcher, lose
			"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "x", "MASTER_PORT": "29500",
		}, Env{Rank: 5, WorldSize: 8, LocalRank: 1, LocalWorldSize: 4, StoreAddr: "10.0.0.1:4000", Token: "secret", Source: SourceDetcoll}},
		{"detcoll ipv6 store", map[string]string{"DETCOLL_RANK": "0", "DETCOLL_WORLD_SIZE": "2", "DETCOLL_STORE_ADDR": "[::1]:4000"},
			Env{Rank: 0, WorldSize: 2, LocalRank: 0, LocalWorldSize: 2, StoreAddr: "[::1]:4000", Source: SourceDetcoll}},
		{"detcoll world 1 no store", map[string]string{"DETCOLL_RANK": "0", "DETCOLL_WORLD_SIZE": "1"},
			Env{WorldSize: 1, LocalWorldSize: 1, Source: SourceDetcoll}},
		{"torchrun port rule", map[string]string{
			"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
			"MASTER_ADDR": "node0", "MASTER_PORT": "29500", "DETCOLL_TOKEN": "tok",
		}, Env{Rank: 3, WorldSize: 4, LocalRank: 1, LocalWorldSize: 2, StoreAddr: "node0:29501", Token: "tok", Source: SourceTorchrun}},
		{"torchrun DETCOLL_STORE_PORT", map[string]string{
			"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
			"MASTER_ADDR": "node0", "MASTER_PORT": "29500", "DETCOLL_STORE_PORT": "40000",
		}, Env{Rank: 0, WorldSize: 2, LocalRank: 0, LocalWorldSize: 2, StoreAddr: "node0:40000", Source: SourceTorchrun}},
		{"torchrun DETCOLL_STORE_ADDR wins", map[string]string{
			"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "node0", "MASTER_PORT": "29500",
			"DETCOLL_STORE_PORT": "40000", "DETCOLL_STORE_ADDR": "other:5000",
		}, Env{Rank: 1, WorldSize: 2, LocalRank: 1, LocalWorldSize: 2, StoreAddr: "other:5000", Source: SourceTorchrun}},
		{"torchrun ipv6 master", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "fe80::1", "MASTER_PORT": "29500"},
			Env{Rank: 0, WorldSize: 2, LocalWorldSize: 2, StoreAddr: "[fe80::1]:29501", Source: SourceTorchrun}},
		{"torchrun local defaults", map[string]string{"RANK": "3", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "7"},
			Env{Rank: 3, WorldSize: 4, LocalRank: 1, LocalWorldSize: 2, StoreAddr: "h:8", Source: SourceTorchrun}},
		{"torchrun world 1 without master", map[string]string{"RANK": "0", "WORLD_SIZE": "1"},
			Env{WorldSize: 1, LocalWorldSize: 1, Source: SourceTorchrun}},
		{"torchrun spaces", map[string]string{"RANK": " 1 ", "WORLD_SIZE": "2\n", "MASTER_ADDR": "h", "MASTER_PORT": "9"},
			Env{Rank: 1, WorldSize: 2, LocalRank: 1, LocalWorldSize: 2, StoreAddr: "h:10", Source: SourceTorchrun}},
		{"slurm ntasks per node", map[string]string{
			"SLURM_PROCID": "6", "SLURM_NTASKS": "8", "SLURM_LOCALID": "2", "SLURM_NTASKS_PER_NODE": "4",
			"SLURM_TASKS_PER_NODE": "9(x2)", "MASTER_ADDR": "n0", "MASTER_PORT": "1234",
		}, Env{Rank: 6, WorldSize: 8, LocalRank: 2, LocalWorldSize: 4, StoreAddr: "n0:1235", Source: SourceSlurm}},
		{"slurm tasks per node first", map[string]string{
			"SLURM_PROCID": "1", "SLURM_NTASKS": "7", "SLURM_LOCALID": "1", "SLURM_TASKS_PER_NODE": "4(x1),3",
			"DETCOLL_STORE_ADDR": "n0:5000",
		}, Env{Rank: 1, WorldSize: 7, LocalRank: 1, LocalWorldSize: 4, StoreAddr: "n0:5000", Source: SourceSlurm}},
		{"slurm tasks per node by node id", map[string]string{
			"SLURM_PROCID": "10", "SLURM_NTASKS": "11", "SLURM_LOCALID": "2", "SLURM_TASKS_PER_NODE": "4(x2),3",
			"SLURM_NODEID": "2", "DETCOLL_STORE_ADDR": "n0:5000",
		}, Env{Rank: 10, WorldSize: 11, LocalRank: 2, LocalWorldSize: 3, StoreAddr: "n0:5000", Source: SourceSlurm}},
		{"slurm nprocs", map[string]string{"SLURM_PROCID": "0", "SLURM_NPROCS": "1"},
			Env{WorldSize: 1, LocalWorldSize: 1, Source: SourceSlurm}},
		{"openmpi", map[string]string{
			"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
			"OMPI_COMM_WORLD_LOCAL_SIZE": "2", "MASTER_ADDR": "m", "MASTER_PORT": "100", "DETCOLL_TOKEN": "x",
		}, Env{Rank: 2, WorldSize: 4, LocalRank: 0, LocalWorldSize: 2, StoreAddr: "m:101", Token: "x", Source: SourceOpenMPI}},
		{"torchrun beats slurm", map[string]string{
			"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "5",
			"SLURM_PROCID": "0", "SLURM_NTASKS": "1",
		}, Env{Rank: 1, WorldSize: 2, LocalRank: 1, LocalWorldSize: 2, StoreAddr: "h:6", Source: SourceTorchrun}},
		{"slurm beats openmpi", map[string]string{
			"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
		}, Env{WorldSize: 1, LocalWorldSize: 1, Source: SourceSlurm}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromEnv(getenv(tt.env))
			if err != nil {
				t.Fatalf("FromEnv: %v", err)
			}
			if got != tt.want {
				t.Fatalf("FromEnv =\n %+v, want\n %+v", got, tt.want)
			}
		})
	}
}

func TestFromEnvErrors(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string // substring of the error
	}{
		{"detcoll rank non-numeric", map[string]string{"DETCOLL_RANK": "one", "DETCOLL_WORLD_SIZE": "2", "DETCOLL_STORE_ADDR": "h:1"}, `DETCOLL_RANK="one" is not a non-negative integer`},
		{"detcoll negative rank", map[string]string{"DETCOLL_RANK": "-1", "DETCOLL_WORLD_SIZE": "2", "DETCOLL_STORE_ADDR": "h:1"}, `DETCOLL_RANK="-1"`},
		{"detcoll missing world", map[string]string{"DETCOLL_RANK": "0"}, "DETCOLL_WORLD_SIZE is not set"},
		{"detcoll missing rank", map[string]string{"DETCOLL_WORLD_SIZE": "2"}, "DETCOLL_RANK is not set"},
		{"detcoll rank too big", map[string]string{"DETCOLL_RANK": "2", "DETCOLL_WORLD_SIZE": "2", "DETCOLL_STORE_ADDR": "h:1"}, "DETCOLL_RANK=2 is not below DETCOLL_WORLD_SIZE=2"},
		{"detcoll world zero", map[string]string{"DETCOLL_RANK": "0", "DETCOLL_WORLD_SIZE": "0"}, "DETCOLL_WORLD_SIZE=0 must be at least 1"},
		{"detcoll local rank too big", map[string]string{"DETCOLL_RANK": "1", "DETCOLL_WORLD_SIZE": "4", "DETCOLL_LOCAL_RANK": "2", "DETCOLL_LOCAL_WORLD_SIZE": "2", "DETCOLL_STORE_ADDR": "h:1"}, "DETCOLL_LOCAL_RANK=2 is not below DETCOLL_LOCAL_WORLD_SIZE=2"},
		{"detcoll local world too big", map[string]string{"DETCOLL_RANK": "1", "DETCOLL_WORLD_SIZE": "2", "DETCOLL_LOCAL_WORLD_SIZE": "3", "DETCOLL_STORE_ADDR": "h:1"}, "DETCOLL_LOCAL_WORLD_SIZE=3 exceeds DETCOLL_WORLD_SIZE=2"},
		{"detcoll local world zero", map[string]string{"DETCOLL_RANK": "1", "DETCOLL_WORLD_SIZE": "2", "DETCOLL_LOCAL_WORLD_SIZE": "0", "DETCOLL_STORE_ADDR": "h:1"}, "DETCOLL_LOCAL_WORLD_SIZE=0 must be at least 1"},
		{"detcoll local rank non-numeric", map[string]string{"DETCOLL_RANK": "1", "DETCOLL_WORLD_SIZE": "2", "DETCOLL_LOCAL_RANK": "x", "DETCOLL_STORE_ADDR": "h:1"}, `DETCOLL_LOCAL_RANK="x"`},
		{"detcoll no store", map[string]string{"DETCOLL_RANK": "0", "DETCOLL_WORLD_SIZE": "2"}, "no store address"},
		{"detcoll store not host:port", map[string]string{"DETCOLL_RANK": "0", "DETCOLL_WORLD_SIZE": "2", "DETCOLL_STORE_ADDR": "node0"}, `DETCOLL_STORE_ADDR="node0" is not host:port`},
		{"detcoll store no host", map[string]string{"DETCOLL_RANK": "0", "DETCOLL_WORLD_SIZE": "2", "DETCOLL_STORE_ADDR": ":80"}, "has no host"},
		{"detcoll store bad port", map[string]string{"DETCOLL_RANK": "0", "DETCOLL_WORLD_SIZE": "2", "DETCOLL_STORE_ADDR": "h:99999"}, "1-65535"},
		{"torchrun non-numeric world", map[string]string{"RANK": "0", "WORLD_SIZE": "two"}, `WORLD_SIZE="two"`},
		{"torchrun rank too big", map[string]string{"RANK": "4", "WORLD_SIZE": "4", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, "RANK=4 is not below WORLD_SIZE=4"},
		{"torchrun missing rank", map[string]string{"WORLD_SIZE": "4"}, "RANK is not set"},
		{"torchrun missing master", map[string]string{"RANK": "0", "WORLD_SIZE": "2"}, "no store address"},
		{"torchrun missing master port", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h"}, "MASTER_PORT is not"},
		{"torchrun bad master port", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "http"}, `MASTER_PORT="http"`},
		{"torchrun master port 65535", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "65535"}, "no MASTER_PORT+1"},
		{"torchrun store port is torch's", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "29500", "DETCOLL_STORE_PORT": "29500"}, "torch's port"},
		{"torchrun store addr is torch's", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "29500", "DETCOLL_STORE_ADDR": "h:29500"}, "torch's address"},
		{"torchrun bad store port", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1", "DETCOLL_STORE_PORT": "0"}, `DETCOLL_STORE_PORT="0"`},
		{"torchrun store port without master", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "DETCOLL_STORE_PORT": "5000"}, "MASTER_ADDR is not"},
		{"slurm missing ntasks", map[string]string{"SLURM_PROCID": "0"}, "SLURM_NTASKS is not set"},
		{"slurm procid too big", map[string]string{"SLURM_PROCID": "3", "SLURM_NTASKS": "3", "DETCOLL_STORE_ADDR": "h:1"}, "SLURM_PROCID=3 is not below SLURM_NTASKS=3"},
		{"slurm bad tasks per node", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_TASKS_PER_NODE": "2(3)", "DETCOLL_STORE_ADDR": "h:1"}, "malformed task list"},
		{"slurm tasks per node no entry", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_TASKS_PER_NODE": "1(x2)", "SLURM_NODEID": "2", "DETCOLL_STORE_ADDR": "h:1"}, "no entry for node 2"},
		{"slurm local id too big", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_LOCALID": "2", "SLURM_TASKS_PER_NODE": "2(x2)", "DETCOLL_STORE_ADDR": "h:1"}, "SLURM_LOCALID=2 is not below SLURM_TASKS_PER_NODE=2"},
		{"slurm no master", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}, "slurm: world size is 2 but no store address"},
		{"openmpi missing size", map[string]string{"OMPI_COMM_WORLD_RANK": "0"}, "OMPI_COMM_WORLD_SIZE is not set"},
		{"openmpi bad local size", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "2.0", "DETCOLL_STORE_ADDR": "h:1"}, `OMPI_COMM_WORLD_LOCAL_SIZE="2.0"`},
		{"openmpi no master", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}, "openmpi: world size is 2 but no store address"},
		{"single bad store addr", map[string]string{"DETCOLL_STORE_ADDR": "nope"}, "is not host:port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromEnv(getenv(tt.env))
			if err == nil {
				t.Fatalf("FromEnv = %+v, want an error containing %q", got, tt.want)
			}
			if !errors.Is(err, ErrInvalidEnv) {
				t.Errorf("error %v does not wrap ErrInvalidEnv", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

// The port rule: under torchrun, detcoll's store never takes MASTER_PORT.
func TestFromEnvPortRule(t *testing.T) {
	for _, port := range []string{"1", "29500", "65534"} {
		env, err := FromEnv(getenv(map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": port}))
		if err != nil {
			t.Fatal(err)
		}
		if env.StoreAddr == "h:"+port {
			t.Fatalf("store took torch's port %s", port)
		}
		if !env.ServesStore() {
			t.Errorf("rank 0 under torchrun should serve the store")
		}
	}
	env, err := FromEnv(getenv(map[string]string{"DETCOLL_RANK": "0", "DETCOLL_WORLD_SIZE": "2", "DETCOLL_STORE_ADDR": "h:1"}))
	if err != nil {
		t.Fatal(err)
	}
	if env.ServesStore() {
		t.Errorf("rank 0 under detcoll's launcher must not serve the store")
	}
}

func TestSlurmTasksOnNode(t *testing.T) {
	for _, tt := range []struct {
		list, node string
		want       int
	}{
		{"4", "", 4}, {"4", "0", 4}, {"2(x3),1", "", 2}, {"2(x3),1", "2", 2}, {"2(x3),1", "3", 1}, {"1,2,3", "1", 2},
	} {
		got, err := slurmTasksOnNode(tt.list, tt.node)
		if err != nil || got != tt.want {
			t.Errorf("slurmTasksOnNode(%q, %q) = %d, %v; want %d", tt.list, tt.node, got, err, tt.want)
		}
	}
	for _, list := range []string{"", "x", "2(x)", "2(x0)", "0", "2(y3)", "2(x3"} {
		if got, err := slurmTasksOnNode(list, ""); err == nil {
			t.Errorf("slurmTasksOnNode(%q) = %d, want an error", list, got)
		}
	}
}

func TestLaunched(t *testing.T) {
	for env, want := range map[string]bool{"": false, "DETCOLL_RANK": true, "RANK": true, "SLURM_PROCID": true, "OMPI_COMM_WORLD_RANK": true, "LOCAL_RANK": false} {
		got := Launched(func(k string) string {
			if k == env {
				return "0"
			}
			return ""
		})
		if got != want {
			t.Errorf("%q set: Launched = %v, want %v", env, got, want)
		}
	}
}
