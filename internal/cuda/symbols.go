package cuda

// LibraryNames are the candidates for the driver library; $DETCOLL_CUDA_LIB
// overrides them.
var LibraryNames = []string{"libcuda.so.1", "libcuda.so"}

// LibraryEnv names the environment variable that overrides LibraryNames.
const LibraryEnv = "DETCOLL_CUDA_LIB"
