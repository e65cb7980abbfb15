// Package gpu reads the memory a model's KV cache can use and sizes
// Ollama's num_ctx to it. The probes read device memory: NVIDIA through
// NVML, AMD through sysfs, Apple's unified memory, or, without a GPU,
// system RAM within the process's cgroup limits (system.go). The Monitor
// samples a probe together with the models the backend has loaded (a
// Reading) and keeps the memory guard's level (guard.go). The Sizer picks
// num_ctx per model from a Reading and the model's KV-cache bytes per
// token (modelinfo.Facts), holding each choice steady (sizer.go); a Report
// shows both as text.
//
// The proxy wires it up once and then reads cached values per request:
//
//	probe, err := gpu.Detect(ctx, cfg, log) // logs which probe and why
//	sizer := gpu.NewSizer(cfg)
//	mon := gpu.NewMonitor(probe, cfg, gpu.MonitorOptions{
//		Logger: log,
//		Loaded: listRunning, // Ollama's /api/ps as []modelinfo.Loaded
//	})
//	go mon.Run(ctx)
//	mon.Subscribe(func(e gpu.Event) { /* LevelEmergency: snapshot and clear sessions */ })
//
//	// per chat request to Ollama:
//	defer mon.Active()()
//	w := gpu.Workload{Name: name, Facts: facts, Weights: size} // /api/show model_info, /api/tags size
//	d := sizer.Decide(w, mon.Current(ctx))
//	numCtx, reason := d.Client(clientNumCtx) // options.num_ctx, X-Ctxproxy-Num-Ctx
//	if mon.Reading().Level >= gpu.LevelCompress { /* lower the strategy threshold */ }
//
// Nothing here makes HTTP calls; model facts are passed in.
package gpu
