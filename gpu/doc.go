// Package gpu measures the memory a model's KV cache can use (NVIDIA through
// NVML, AMD through sysfs, Apple unified memory, or system RAM and cgroup
// limits), turns model facts into KV-cache bytes per token, picks Ollama's
// num_ctx from that, and guards against running out of memory.
//
// The proxy wires it up once and then reads cached values per request:
//
//	probe, err := gpu.Detect(ctx, cfg, log)   // logs which probe and why
//	sizer := gpu.NewSizer(cfg)
//	mon := gpu.NewMonitor(probe, cfg, gpu.MonitorOptions{Logger: log, Loaded: sizer.Loaded})
//	go mon.Run(ctx)
//	mon.Subscribe(func(e gpu.Event) { /* e.Level == gpu.LevelEmergency: snapshot and clear */ })
//
//	// per chat request to Ollama:
//	defer mon.Active()()
//	d := sizer.Decide(model, mon.Snapshot())  // model facts from /api/show, /api/ps
//	numCtx, warning := d.Client(clientNumCtx)
//
// Nothing here makes HTTP calls; model facts are passed in.
package gpu
