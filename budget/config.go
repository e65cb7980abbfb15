package budget

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/ctxproxy/ctxproxy/budget/tokenizer"
	"github.com/ctxproxy/ctxproxy/internal/check"
)

// EncodingAuto, the default Config.Encoding, picks an encoding by model
// family (EncodingFor).
const EncodingAuto = "auto"

// Config configures counting and limits. Its zero value works: automatic
// encoding, 4 characters per token when approximating, 768 tokens per
// image, calibration on, 100000 cached counts, the built-in model table.
// The first five fields are the tokens: section of the config file.
type Config struct {
	// Encoding is auto (by model family, see EncodingFor), cl100k_base,
	// o200k_base or approximate. "" means auto.
	Encoding string `mapstructure:"encoding"`
	// ApproxCharsPerToken is the approximate counter's divisor, used
	// with encoding approximate and when an encoding cannot load. 0
	// means 4; a smaller divisor such as 3.5 counts more tokens.
	ApproxCharsPerToken float64 `mapstructure:"approx_chars_per_token"`
	// ImageTokens is the cost of one attached image. 0 means 768.
	ImageTokens int `mapstructure:"image_tokens"`
	// Calibrate turns per-model calibration from the backend's reported
	// prompt tokens on or off. nil means on.
	Calibrate *bool `mapstructure:"calibrate"`
	// CacheEntries bounds the cache of text counts shared by all
	// encodings. 0 means 100000.
	CacheEntries int `mapstructure:"cache_entries"`

	// Models overrides limits (and sets a starting multiplier) per model
	// name or family prefix (the models: section), matched like the
	// built-in table: "llama3.1" applies to "llama3.1:8b-instruct-q4_K_M".
	Models map[string]Model `mapstructure:"-"`
	// ReserveOutput is the reply reserve of a model without an output
	// limit of its own: local models (context.reserve_output). 0 means
	// 1024.
	ReserveOutput int `mapstructure:"-"`
	// Reserved is a safety margin subtracted from every model's window
	// (strategy.reserved). 0 means none.
	Reserved int `mapstructure:"-"`
}

// Model is one entry of the models: section. Zero fields keep what the
// table (or the backend) says.
type Model struct {
	MaxTokens       int `mapstructure:"max_tokens"`
	MaxOutputTokens int `mapstructure:"max_output_tokens"`
	// Multiplier is the starting correction of raw counts for this model;
	// calibration refines it, and
	// it is the fixed correction when calibration is off. 0 means 1.
	Multiplier float64 `mapstructure:"multiplier"`
}

// Validate returns every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	switch c.Encoding {
	case "", EncodingAuto, tokenizer.EncodingCL100K, tokenizer.EncodingO200K, tokenizer.EncodingApproximate:
	default:
		errs = append(errs, fmt.Errorf("tokens.encoding: %q is not auto, cl100k_base, o200k_base or approximate", c.Encoding))
	}
	if c.ApproxCharsPerToken < 0 || c.ApproxCharsPerToken > 100 || math.IsNaN(c.ApproxCharsPerToken) {
		errs = append(errs, fmt.Errorf("tokens.approx_chars_per_token: %v is not in (0, 100]", c.ApproxCharsPerToken))
	}
	errs = append(errs, check.NotNegative("tokens.image_tokens", c.ImageTokens),
		check.NotNegative("tokens.cache_entries", c.CacheEntries),
		check.NotNegative("context.reserve_output", c.ReserveOutput),
		check.NotNegative("strategy.reserved", c.Reserved))
	names := make([]string, 0, len(c.Models))
	for name := range c.Models {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		m := c.Models[name]
		if family(name) == "" {
			errs = append(errs, fmt.Errorf("models: %q is not a model name", name))
		}
		if m.MaxTokens < 0 || m.MaxOutputTokens < 0 {
			errs = append(errs, fmt.Errorf("models.%s: negative token limit", name))
		}
		if m.MaxTokens > 0 && m.MaxOutputTokens >= m.MaxTokens {
			errs = append(errs, fmt.Errorf("models.%s: max_output_tokens %d leaves nothing of max_tokens %d", name, m.MaxOutputTokens, m.MaxTokens))
		}
		if m.Multiplier != 0 {
			errs = append(errs, check.Within("models."+name+".multiplier", m.Multiplier, minRatio, maxRatio))
		}
	}
	return errors.Join(errs...)
}

func (c Config) calibrate() bool { return c.Calibrate == nil || *c.Calibrate }

func (c Config) approx() tokenizer.Approx {
	return tokenizer.Approx{CharsPerToken: c.ApproxCharsPerToken}
}

func (c Config) reserveOutput() int {
	if c.ReserveOutput > 0 {
		return c.ReserveOutput
	}
	return DefaultOutputTokens
}
