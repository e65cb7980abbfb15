// Package gpu measures the memory a model's KV cache can use (NVIDIA through
// NVML, AMD through sysfs, Apple unified memory, or system RAM and cgroup
// limits), turns model facts into KV-cache bytes per token, picks Ollama's
// num_ctx from that, and guards against running out of memory.
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
//	numCtx, warning := d.Client(clientNumCtx) // options.num_ctx, X-Ctxproxy-Num-Ctx
//	if mon.Reading().Level >= gpu.LevelCompress { /* lower the strategy threshold */ }
//
// Nothing here makes HTTP calls; model facts are passed in.
package gpu
