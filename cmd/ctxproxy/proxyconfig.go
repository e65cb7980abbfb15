package main

import (
	"os"

	"github.com/ctxproxy/ctxproxy/config"
	"github.com/ctxproxy/ctxproxy/plan"
	"github.com/ctxproxy/ctxproxy/proxy"
	"github.com/ctxproxy/ctxproxy/proxy/admin"
	"github.com/ctxproxy/ctxproxy/proxy/edge"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// proxyConfig is what the proxy gets from the configuration. It is built
// here, where ctxproxy is put together: the configuration imports no part
// of the server.
func proxyConfig(c config.Config, version string) proxy.Config {
	return proxy.Config{
		Backend:               c.Servers()[0].URL,
		BackendKind:           c.Backend.Kind,
		MaxBody:               int64(c.MaxBody),
		ResponseHeaderTimeout: c.Backend.ResponseHeaderTimeout,
		DialTimeout:           c.Backend.DialTimeout,
		SessionHeader:         c.Session.Header,
		NoFingerprint:         !c.Session.Fingerprint,
		NoClientIDs:           !c.Session.ClientIDs,
		ScopeHeaders:          c.Session.ScopeHeader,
		Planning: plan.Config{TranslateOpenAI: c.Backend.TranslateOpenAI, Accumulate: c.Session.Accumulate,
			RespectClient: c.Context.RespectClient, NoExact: !c.Tokens.Exact, Inband: c.Commands.Inband},
		Limits: edge.Limits{MaxInflight: int64(c.Limits.MaxInflight), BodyMemory: int64(c.Limits.BodyMemory),
			QueueWait: c.Limits.QueueWait, MinBodyRate: int64(c.Limits.MinBodyRate)},
		Hosts: edge.HostPolicy{Loopback: edge.Loopback(c.Listen), AllowedHosts: c.AllowedHosts,
			AllowedOrigins: c.AllowedOrigins},
		Version:    version,
		AdminToken: c.Admin.Token,
		AdminOff:   c.Admin.Token == "" && !edge.Loopback(c.Listen),
		Status: admin.StatusInfo{
			MinSize: c.Context.MinSize, MaxSize: c.Context.MaxSize,
			KVQuantization: c.Context.KVQuantization, NumParallel: c.Context.NumParallel,
			SnapshotStore: c.Snapshots.Store, AutoThreshold: c.Snapshots.AutoThreshold, MaxCount: c.Snapshots.MaxCount,
			SummarizeModel: c.Summarize.Model, KeepRecent: c.Summarize.KeepRecent,
			Replica: replicaName(c),
		},
	}
}

// replicaName names this ctxproxy among replicas sharing the Redis store:
// its host name (a container's id under Docker); "" on the file store.
func replicaName(c config.Config) string {
	if c.Snapshots.Store != snapshots.StoreRedis {
		return ""
	}
	name, err := os.Hostname()
	if err != nil {
		return ""
	}
	return name
}
