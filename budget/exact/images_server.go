package exact

// Images on Ollama 0.30 and later. From 0.30 Ollama runs every model in
// llama.cpp's llama-server, whose multimodal library (mtmd, with its
// clip vision encoders) turns an image into prompt tokens, not Ollama's
// own model code: the rules in visionFamilies no longer apply there.
// Ollama hands llama-server each image's bytes as they came (a WebP as
// PNG) with a media marker where the prompt's [img-N] tag was; its
// compatibility layer rewrites the vision keys of the files its own
// converter wrote (model_info's "<arch>.vision.*") into clip's, and
// llama-server's prompt_n, which Ollama reports as prompt_eval_count,
// counts each image chunk's tokens: what clip's encoder outputs for the
// image after mtmd's preprocessing (a fixed-size resize, a size-dependent
// resize, tiling), plus the marker text mtmd writes around it.
//
// serverFamilies maps each architecture whose images ctxproxy counts that
// way to its rule, made from model_info; each is checked against a real
// llama-server Ollama in the e2e suite. Other families, and models whose
// projector is a file of its own, are estimated (projectorEstimate).
var serverFamilies = map[string]func(kv map[string]any) imageCoster{
	"gemma3": gemma3ServerImages,
}

// serverImagesOf returns how a model's images cost on llama-server: nil
// when ctxproxy does not know its family's rule there, or the projector
// is a file of its own (projector_info holds its facts), which Ollama's
// compatibility layer leaves as it is.
func serverImagesOf(kv, projectorInfo map[string]any) imageCoster {
	if len(projectorInfo) > 0 {
		return nil
	}
	arch, _ := kv["general.architecture"].(string)
	if rule := serverFamilies[arch]; rule != nil {
		return rule(kv)
	}
	return nil
}
